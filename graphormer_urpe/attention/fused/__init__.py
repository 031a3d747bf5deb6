"""The fused URPE attention kernel: the Triton kernels (:mod:`.kernels`), their launches and
autograd function on the host (:mod:`.launch`), and the self-check with its way back to the
eager kernels (:mod:`.guard`).

Importing this package, or :mod:`.guard`, does not import Triton; :mod:`.kernels` tries to.
"""
