// foo's device for a C++ program without Python: link foo_backend/lib/libfoo_backend.so (beside libtorch) and
// call foo_backend_init() once before using the "foo" device. Python's `import foo_backend` does both.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

__attribute__((visibility("default"))) void foo_backend_init(void);

#ifdef __cplusplus
}  // extern "C"
#endif
