"""The embedded dataset: procedurally rendered people performing actions in scenes.

identity (appearance) ─┐
action (joint angles) ─┼─▶ body.forward_kinematics ─▶ render.draw_person ─▶ frame + annotations
scene (background) ────┘
"""
