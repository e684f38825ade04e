"""Models that mark their own pipeline stages with px.stage (to_static needs them in a file)."""

import paddle.nn as nn
import paddle.nn.functional as F

import paddle_xla as px


class StagedMLP(nn.Layer):
    """The MLP of test_training, its three layers on stages 0, 1, 2."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        with px.stage(0):
            h = F.gelu(self.l1(x))
        with px.stage(1):
            h = F.relu(self.l2(h))
        with px.stage(2):
            return self.l3(h)


class BackwardsMLP(StagedMLP):
    """Stages out of order: stage 0 code reads what stage 1 computed."""

    def forward(self, x):
        with px.stage(1):
            h = F.gelu(self.l1(x))
        with px.stage(0):
            return self.l3(F.relu(self.l2(h)))
