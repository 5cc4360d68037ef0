"""Expected failures of tests/test_opinfo_parity.py.

Key: (check, op, dtype). check is "forward", "grad", "forward_dtype", "out", "inplace" or "errors"; op is the OpInfo's
name (plus "." + variant_test_name); dtype is the dtype's name ("float32" for the float32-only checks).
Value: why it fails (the observed error). Entries are strict xfails: an entry that passes fails the suite, so delete
it when the backend is fixed. A reason starting with "crashes" marks a pair that kills the process: it is not run.
Every entry counts as NOT matching in the parity summary.
"""

EXPECTED_FAILURES = {
    ('forward_dtype', 'nn.functional.linear_cross_entropy.chunked_none', 'float16'):
        "not a backend bug: F.linear_cross_entropy picks its accumulation dtype per device type in Python (_AUTO_DEFAULTS / _resolve_auto_acc_dtype know 'cpu' and 'cuda'), so on foo it accumulates in the input's half dtype: values differ from CPU: Tensor-likes are not close! Mismatched elements: 1 / 8 (12.5%) Greatest abso...",
}
