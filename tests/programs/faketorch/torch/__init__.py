"""A stand-in for torch's CUDA memory API, for testing the injected probe on a
machine with no GPU: the program sets "allocated" bytes and the probe reads
them through the same calls it uses on a real GPU."""
import types


class _Cuda:
    def __init__(self):
        self._alloc = self._peak = 0

    def is_initialized(self):
        return True

    def is_available(self):
        return True

    def memory_allocated(self):
        return self._alloc

    def memory_reserved(self):
        return self._alloc

    def max_memory_allocated(self):
        return self._peak

    def max_memory_reserved(self):
        return self._peak

    def reset_peak_memory_stats(self):
        self._peak = self._alloc

    def memory_stats(self):
        return {"num_alloc_retries": 0, "num_ooms": 0}

    def synchronize(self):
        pass

    def get_device_properties(self, i):
        return types.SimpleNamespace(name="Fake GPU", total_memory=80 * 2**30)

    def device_count(self):
        return 1

    def set(self, n):  # test hook: "allocate" n bytes in total
        self._alloc = n
        self._peak = max(self._peak, n)


cuda = _Cuda()
__version__ = "0.0-fake"
version = types.SimpleNamespace(cuda="fake")
