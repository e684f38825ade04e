"""One-op Layers for the differential fuzzer. to_static reads forward's source, so they live in a
real file; the op and its attributes are set per case: forward calls self.f(inputs, **self.kw)."""

import paddle


class One1(paddle.nn.Layer):
    # NOTE: to_static needs a forward with named positional arguments, not *args; one class per arity.
    def __init__(self, f, kw):
        super().__init__()
        self.f = f
        self.kw = kw

    def forward(self, a):
        return self.f(a, **self.kw)


class One2(One1):
    def forward(self, a, b):
        return self.f(a, b, **self.kw)


class One3(One1):
    def forward(self, a, b, c):
        return self.f(a, b, c, **self.kw)


class List1(One1):
    # ops that take a list of tensors (concat, stack)
    def forward(self, a):
        return self.f([a], **self.kw)


class List2(One1):
    def forward(self, a, b):
        return self.f([a, b], **self.kw)


class List3(One1):
    def forward(self, a, b, c):
        return self.f([a, b, c], **self.kw)


ONE = {1: One1, 2: One2, 3: One3}
LISTED = {1: List1, 2: List2, 3: List3}
