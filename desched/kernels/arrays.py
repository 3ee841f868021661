"""The array types of the kernel sources' annotations (``desched.structures.kernelc`` reads
them as pointers to int64 and float64)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
