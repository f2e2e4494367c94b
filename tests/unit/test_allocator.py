from utils.allocator import user_chose_malloc


def test_a_users_malloc_settings_are_left_alone():
    assert not user_chose_malloc({})
    assert not user_chose_malloc({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "LD_PRELOAD": "/lib/libfoo.so"})
    assert user_chose_malloc({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert user_chose_malloc({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert user_chose_malloc({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})
    assert user_chose_malloc({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"})
