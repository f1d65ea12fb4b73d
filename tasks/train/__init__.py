"""Stage ``train`` (and ``pretrain``): the entry in :mod:`tasks.train.stage`, the training methods in
:mod:`tasks.train.methods`, the seeds a row trains in :mod:`tasks.train.seeds`."""
