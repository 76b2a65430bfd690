"""Images of one bright square on noise, with its box (x1, y1, x2, y2) as ground truth."""

import numpy as np

from config import config as cfg


class SquareBoxes(object):
    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.n

    def sample(self):
        size = cfg.IMAGE_SIZE
        img = self.rng.uniform(0, 0.2, size=(size, size, 1)).astype('float32')
        side = self.rng.randint(8, 15)
        x1, y1 = self.rng.randint(0, size - side, size=2)
        img[y1:y1 + side, x1:x1 + side] = 1.0
        return img, np.array([[x1, y1, x1 + side, y1 + side]], 'float32')

    def __iter__(self):
        for _ in range(self.n):
            img, boxes = self.sample()
            yield [img, boxes]
