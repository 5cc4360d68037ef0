"""Expected failures of tests/test_inductor_opinfo.py: ops whose compiled result fails on foo only.

Key: the OpInfo's name (plus "." + variant_test_name). Value: why it fails (a diagnosis, not only the error).
Ops that fail on CPU too are Inductor's limitations: the test records them itself and they do not belong here.
Entries are strict xfails: an entry that passes (or that starts failing on CPU too) fails the suite, so delete it
when the cause is fixed.
"""

_BATCH_NORM_EVAL_SAVED_STATS = (
    "foo defect: in eval mode (training=False) foo's eager kernel, CPU's, returns empty save_mean/save_invstd "
    "(shape [0]), but PyTorch's meta kernel and decomposition give every non-CPU device CUDA's (running_mean, "
    "1/sqrt(running_var + eps)), shape [C]: compiled outputs 1 and 2 have shape [C], eager's [0]")

_CONV_CHANNELS_LAST_STRIDES = (
    "foo defect: foo's convolution returns channels_last outputs for channels_last operands (CPU's kernel), but "
    "PyTorch's fake tensor for a PrivateUse1 device picks ConvBackend::Overrideable, whose output is contiguous; "
    "Inductor's layout optimization passes the extern convolution channels_last operands, and the compiled "
    "graph's assert_size_stride on its output fails")

EXPECTED_FAILURES = {
    "_native_batch_norm_legit": _BATCH_NORM_EVAL_SAVED_STATS,
    "native_batch_norm": _BATCH_NORM_EVAL_SAVED_STATS,
    "nn.functional.conv2d": _CONV_CHANNELS_LAST_STRIDES,
    "nn.functional.conv_transpose2d": _CONV_CHANNELS_LAST_STRIDES,
}
