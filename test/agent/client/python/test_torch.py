"""Torch tensors through a real dev agent: CPU via staging or an arena, CUDA via IPC.

Skipped, with the reason printed, where torch is not importable; the CUDA
tests also where torch sees no GPU or the agent has no CUDA.
"""
import json
import os
import struct
import tempfile
import unittest
from typing import Any, Dict

from agent_process import DevAgent, shared_agent
from agentd_client import AgentError

try:
    import torch

    from agentd_client.torch_support import SharedTensorArena, TorchStateClient, state_dict_keys, tensor_key
    TORCH_MISSING = ""
except ImportError as err:
    TORCH_MISSING = f"torch is not importable ({err}); the torch paths are untested here"

agent: DevAgent


def setUpModule() -> None:
    global agent
    if TORCH_MISSING:
        raise unittest.SkipTest(TORCH_MISSING)
    agent = shared_agent()


def write_safetensors(path: str, tensors: "Dict[str, torch.Tensor]", metadata: "Dict[str, str]") -> None:
    """A safetensors file written here, independently of the agent (header JSON, 8-byte aligned, then the bytes)."""
    names = {torch.bfloat16: "BF16", torch.float32: "F32"}
    header: Dict[str, Any] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        blob = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else t.contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


class TorchCpuTest(unittest.TestCase):
    def setUp(self) -> None:
        self.ns = f"pytorch/{self._testMethodName}"
        self.torch_client = TorchStateClient(agent.client)
        self.addCleanup(self.torch_client.close)
        self.addCleanup(lambda: agent.client.drop(prefix=self.ns + "/"))

    def test_cpu_tensors_round_trip_through_staging(self) -> None:
        gen = torch.Generator().manual_seed(1)
        tensors: Dict[str, Any] = {
            "w": torch.randn(64, 32, generator=gen),
            "h": torch.randn(3, 5, 7, generator=gen).to(torch.bfloat16),
            "ids": torch.randint(-2**40, 2**40, (100,), generator=gen),
            "mask": torch.rand(17, generator=gen) > 0.5,
            "step": torch.tensor(42, dtype=torch.int64),
            "slice": torch.arange(1000, dtype=torch.float64)[200:300],  # a view with a storage offset
        }
        keyed = {tensor_key(t, self.ns, name, version=1): t for name, t in tensors.items()}
        results = self.torch_client.offload(keyed)
        self.assertEqual([r["key"] for r in results], [k.text for k in keyed])
        self.assertTrue(all(not r["deduplicated"] for r in results))
        self.assertGreater(self.torch_client.staging_bytes, 0)

        targets = {k: torch.zeros_like(t) for k, t in keyed.items()}
        self.torch_client.onload(targets)
        for k, t in keyed.items():
            self.assertTrue(torch.equal(targets[k], t), k.text)

    def test_a_module_state_dict_round_trips_in_place(self) -> None:
        torch.manual_seed(2)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
        expected = {name: t.detach().clone() for name, t in model.state_dict().items()}
        self.torch_client.offload(state_dict_keys(model.state_dict(), self.ns, version=7), durability="nvme")
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        # Parameters require grad: onload writes them in place all the same.
        self.torch_client.onload(state_dict_keys(dict(model.named_parameters()), self.ns, version=7))
        for name, t in model.state_dict().items():
            self.assertTrue(torch.equal(t, expected[name]), name)

    def test_arena_tensors_need_no_staging(self) -> None:
        with SharedTensorArena(1 << 20) as arena:
            source = arena.empty((128, 64), torch.float32)
            source.copy_(torch.linspace(0, 1, 128 * 64).view(128, 64))
            target = arena.empty((128, 64), torch.float32)
            key = tensor_key(source, self.ns, "w", version=1, offsets=(256, 0))
            self.assertEqual(key.text, f"{self.ns}/w:param@[256,0]/[128,64]:f32#v1")
            client = TorchStateClient(agent.client, arenas=[arena])
            client.offload({key: source})
            client.onload({key: target})
            self.assertEqual(client.staging_bytes, 0, "arena tensors go to the agent directly")
            self.assertTrue(torch.equal(source, target))
            self.assertEqual(arena.locate(target).offset, target.data_ptr() - source.data_ptr() + arena.locate(source).offset)
            self.assertIsNone(arena.locate(torch.zeros(4)), "a tensor outside the arena")
            del source, target
        with SharedTensorArena(4096) as small, self.assertRaises(MemoryError):
            small.empty((2048,), torch.float32)

    def test_mismatched_or_strided_tensors_are_refused_before_any_request(self) -> None:
        t = torch.zeros(8, 8)
        with self.assertRaises(AgentError) as caught:
            self.torch_client.offload({f"{self.ns}/w:param@[0,0]/[8,4]:f32#v1": t})
        self.assertEqual((caught.exception.code, caught.exception.status), ("ERR_SIZE_MISMATCH", None))
        with self.assertRaises(AgentError) as caught:
            self.torch_client.offload({f"{self.ns}/w:param@[0,0]/[8,8]:i32#v1": t})
        self.assertEqual(caught.exception.code, "ERR_BAD_REQUEST", "same bytes, other dtype")
        with self.assertRaises(AgentError) as caught:
            self.torch_client.offload({tensor_key(t.T, self.ns, "w", version=1): t.T})
        self.assertIn("not contiguous", caught.exception.message)
        self.assertEqual(agent.client.residency(prefix=self.ns + "/")["keys"], [])

    def test_a_ranks_shard_pulls_into_torch_tensors_of_the_engines_shapes(self) -> None:
        model, full, address = publish_small_model(self)
        shard = self.torch_client.pull_shard(model, tp=2, rank=1, version=1, from_address=address)
        check_rank1_of_tp2(self, shard, full)
        with self.assertRaises(AgentError) as refused:
            self.torch_client.pull_shard(model, tp=3, rank=0, version=1, from_address=address)
        self.assertEqual(refused.exception.code, "ERR_LAYOUT_INVALID")


def publish_small_model(test: unittest.TestCase) -> "tuple[str, dict[str, torch.Tensor], str]":
    """Publishes a small Llama-shaped model (vocab 100, 8 heads, 2 KV heads) as version 1 of a model named after the test, retired and dropped at cleanup; (model, its tensors, the agent's data address)."""
    gen = torch.Generator().manual_seed(5)
    hidden, vocab = 16, 100
    full = {
        "model.embed_tokens.weight": torch.randn(vocab, hidden, generator=gen).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8 * 4, hidden, generator=gen),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(2 * 4, hidden, generator=gen),
        "model.layers.0.self_attn.o_proj.weight": torch.randn(hidden, 8 * 4, generator=gen),
        "model.norm.weight": torch.randn(hidden, generator=gen),
    }
    model = test._testMethodName.replace("_", "-")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.safetensors")
        write_safetensors(path, full, {"num_attention_heads": "8", "num_key_value_heads": "2"})
        agent.client.call("POST", "/v1/weights/publish", {"model": model, "version": 1, "source": {"kind": "safetensors", "path": path}})
    test.addCleanup(lambda: agent.client.drop(prefix=f"weights/{model}/"))
    test.addCleanup(lambda: agent.client.call("POST", "/v1/weights/retire", {"model": model, "version": 1}))
    return model, full, agent.client.call("GET", "/v1/status")["weights"]["address"]


def check_rank1_of_tp2(test: unittest.TestCase, shard: "dict[str, torch.Tensor]", full: "dict[str, torch.Tensor]") -> None:
    """Rank 1 of tp 2 of publish_small_model's model, as vLLM loads it (compared on the CPU)."""
    shard = {name: x.cpu() for name, x in shard.items()}
    test.assertEqual(sorted(shard), sorted(full))
    embed = shard["model.embed_tokens.weight"]
    # vLLM pads the vocab to 128: 64 rows a rank at tp 2, rank 1 holds 36 real ones
    test.assertEqual(list(embed.shape), [64, 16], "the engine's parameter: the padded vocab's half")
    test.assertTrue(torch.equal(embed[:36], full["model.embed_tokens.weight"][64:]), "the real rows")
    test.assertTrue(torch.equal(embed[36:], torch.zeros(28, 16, dtype=torch.bfloat16)), "padding rows are zeros")
    test.assertTrue(torch.equal(shard["model.layers.0.self_attn.q_proj.weight"], full["model.layers.0.self_attn.q_proj.weight"][16:]))
    test.assertTrue(torch.equal(shard["model.layers.0.self_attn.k_proj.weight"], full["model.layers.0.self_attn.k_proj.weight"][4:]))
    test.assertTrue(torch.equal(shard["model.layers.0.self_attn.o_proj.weight"], full["model.layers.0.self_attn.o_proj.weight"][:, 16:]))
    test.assertTrue(torch.equal(shard["model.norm.weight"], full["model.norm.weight"]))


def cuda_unavailable() -> str:
    if TORCH_MISSING:
        return TORCH_MISSING
    if not torch.cuda.is_available():
        return "torch sees no CUDA device; the CUDA IPC path is untested here"
    return ""


@unittest.skipIf(cuda_unavailable(), cuda_unavailable())
class TorchCudaTest(unittest.TestCase):
    def setUp(self) -> None:
        native = agent.client.call("GET", "/v1/status").get("native") or {}
        cuda = native.get("cuda") or {}
        if not cuda.get("available"):
            self.skipTest(f"the agent has no CUDA: {cuda.get('reason', 'unknown reason')}")
        self.ns = f"pytorch/{self._testMethodName}"
        self.torch_client = TorchStateClient(agent.client)
        self.addCleanup(self.torch_client.close)
        self.addCleanup(lambda: agent.client.drop(prefix=self.ns + "/"))

    def test_cuda_tensors_round_trip_through_ipc(self) -> None:
        big = torch.randn(4096, 256, device="cuda")
        chunk = big[1024:2048]  # storage offset inside a caching-allocator block
        key = tensor_key(chunk, self.ns, "w", version=1, offsets=(1024, 0))
        [result] = self.torch_client.offload({key: chunk})
        self.assertEqual(result["tier"], "host")
        self.assertEqual(self.torch_client.staging_bytes, 0, "CUDA tensors are not staged")
        target = torch.zeros_like(chunk)
        self.torch_client.onload({key: target})
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(target, chunk))
        host = torch.zeros(chunk.shape)
        self.torch_client.onload({key: host})
        self.assertTrue(torch.equal(host, chunk.cpu()), "a CPU onload of a CUDA offload")

    def test_a_ranks_shard_pulls_into_cuda_tensors(self) -> None:
        model, full, address = publish_small_model(self)
        shard = self.torch_client.pull_shard(model, tp=2, rank=1, version=1, from_address=address, device="cuda")
        self.assertTrue(all(x.is_cuda for x in shard.values()), "every tensor of the shard in device memory")
        torch.cuda.synchronize()
        check_rank1_of_tp2(self, shard, full)


if __name__ == "__main__":
    unittest.main()
