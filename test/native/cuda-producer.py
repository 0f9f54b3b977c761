"""Exports GPU memory to cuda.test.ts over CUDA IPC.

Usage: python3 cuda-producer.py torch|raw SIZE
Allocates SIZE bytes on device 0 filled with i % 251, prints one JSON line
{handle (hex), offset, size, event (hex or null)}, then waits for a line on stdin and prints
"ok" when the device bytes equal 255 - (i % 251) (what the test writes back),
else "mismatch".
"""
import json
import sys

mode, size = sys.argv[1], int(sys.argv[2])

if mode == "torch":
    import torch

    base = torch.zeros(size + 4096, dtype=torch.uint8, device="cuda:0")
    tensor = base[4096:]  # a view at an offset inside the allocation
    tensor.copy_((torch.arange(size, device="cuda:0") % 251).to(torch.uint8))
    torch.cuda.synchronize()
    storage = tensor.untyped_storage()
    shared = storage._share_cuda_()
    # (device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
    #  ref_counter_offset, event_handle, event_sync_required)
    offset = shared[3] + tensor.storage_offset()
    event = shared[6].hex() if shared[7] else None
    print(json.dumps({"handle": shared[1].hex(), "offset": offset, "size": size, "event": event}), flush=True)
    sys.stdin.readline()
    expected = (255 - (torch.arange(size, device="cuda:0") % 251)).to(torch.uint8)
    print("ok" if torch.equal(tensor, expected) else "mismatch", flush=True)
else:
    import ctypes

    cudart = None
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            cudart = ctypes.CDLL(name)
            break
        except OSError:
            pass
    if cudart is None:
        print(json.dumps({"error": "libcudart not found"}), flush=True)
        sys.exit(0)
    ptr = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0
    host = (ctypes.c_uint8 * size)(*[i % 251 for i in range(size)])
    assert cudart.cudaMemcpy(ptr, host, ctypes.c_size_t(size), 1) == 0  # HostToDevice
    handle = (ctypes.c_uint8 * 64)()
    assert cudart.cudaIpcGetMemHandle(handle, ptr) == 0
    print(json.dumps({"handle": bytes(handle).hex(), "offset": 0, "size": size, "event": None}), flush=True)
    sys.stdin.readline()
    assert cudart.cudaMemcpy(host, ptr, ctypes.c_size_t(size), 2) == 0  # DeviceToHost
    ok = all(host[i] == 255 - (i % 251) for i in range(size))
    print("ok" if ok else "mismatch", flush=True)
