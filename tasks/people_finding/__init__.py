"""Finding people and faces in a frame with what OpenCV holds: background subtraction, the HOG people detector and
Haar face cascade, and cutting a box out of a frame. Shared by the anonymize and assess stages; one floor above
tasks/core (which never imports it), beside tasks/video_models and tasks/video_data (docs/architecture.md)."""
