"""NumPy references of the layers' arithmetic (NHWC), written from the definitions."""

from __future__ import annotations

import numpy as np


def same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow's SAME padding (before, after) along one axis."""
    eff = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def conv2d(x, w, stride=(1, 1), padding="SAME", dilation=(1, 1), groups=1):
    """A grouped, dilated 2-D convolution of NHWC `x` with HWIO `w`."""
    n, h, wd, _ = x.shape
    kh, kw, cin, cout = w.shape
    if padding == "SAME":
        ph, pw = same_pads(h, kh, stride[0], dilation[0]), same_pads(wd, kw, stride[1], dilation[1])
    else:
        ph, pw = (0, 0), (0, 0)
    xp = np.pad(x, [(0, 0), ph, pw, (0, 0)])
    eh, ew = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh = (xp.shape[1] - eh) // stride[0] + 1
    ow = (xp.shape[2] - ew) // stride[1] + 1
    out = np.zeros((n, oh, ow, cout), dtype=np.float64)
    per_out = cout // groups
    for g in range(groups):
        xs = xp[..., g * cin : (g + 1) * cin]
        ws = w[..., g * per_out : (g + 1) * per_out]
        for i in range(oh):
            for j in range(ow):
                patch = xs[
                    :,
                    i * stride[0] : i * stride[0] + eh : dilation[0],
                    j * stride[1] : j * stride[1] + ew : dilation[1],
                    :,
                ]
                out[:, i, j, g * per_out : (g + 1) * per_out] = np.tensordot(
                    patch, ws, axes=([1, 2, 3], [0, 1, 2])
                )
    return out


def pool2d(x, size, stride, padding, op):
    """Max or average pooling of NHWC `x`; the average is over the window inside the input."""
    n, h, w, c = x.shape
    if padding == "SAME":
        ph, pw = same_pads(h, size[0], stride[0]), same_pads(w, size[1], stride[1])
    else:
        ph, pw = (0, 0), (0, 0)
    fill = -np.inf if op == "max" else np.nan
    xp = np.pad(x.astype(np.float64), [(0, 0), ph, pw, (0, 0)], constant_values=fill)
    oh = (xp.shape[1] - size[0]) // stride[0] + 1
    ow = (xp.shape[2] - size[1]) // stride[1] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = xp[
                :, i * stride[0] : i * stride[0] + size[0], j * stride[1] : j * stride[1] + size[1]
            ]
            out[:, i, j] = win.max(axis=(1, 2)) if op == "max" else np.nanmean(win, axis=(1, 2))
    return out
