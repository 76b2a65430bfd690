"""A helper module: a shuffling DataFlow of its own (no tensorpack needed)."""

import numpy as np

W_TRUE = np.array([[1.0, -1.0], [-2.0, 0.5], [0.3, 0.3]], np.float32)


class Points:
    """Batches of 3-D points and their class; shuffled each pass after reset_state()."""

    def __init__(self, n, batch, seed):
        rng = np.random.RandomState(seed)
        self.x = rng.randn(n, 3).astype(np.float32)
        self.y = np.argmax(self.x @ W_TRUE, axis=1).astype(np.int32)
        self.batch = batch
        self.rng = None

    def reset_state(self):
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return len(self.x) // self.batch

    def __iter__(self):
        order = self.rng.permutation(len(self.x))
        for k in range(len(self)):
            idx = order[k * self.batch:(k + 1) * self.batch]
            yield [self.x[idx], self.y[idx]]
