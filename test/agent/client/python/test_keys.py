"""Canonical keys in Python: format, parse, sizes, and the reasons for rejecting a key."""
import random
import unittest

import agent_process  # noqa: F401  (puts the client's source on sys.path)
from agentd_client import DTYPE_BYTES, AgentError, StateKey, format_key, key_dtype, parse_key

EXAMPLE = "job42/actor/model.layers.3.mlp.up_proj.weight:param@[0,0]/[4096,1024]:bf16#v17"


class KeyTest(unittest.TestCase):
    def assertInvalid(self, text: object, reason_part: str) -> None:
        with self.assertRaises(AgentError) as caught:
            parse_key(text)  # type: ignore[arg-type]
        self.assertEqual(caught.exception.code, "ERR_KEY_INVALID")
        self.assertIsNone(caught.exception.status, "raised locally, no HTTP status")
        self.assertIn(reason_part, caught.exception.message)

    def test_parses_the_documented_example(self) -> None:
        key = parse_key(EXAMPLE)
        self.assertEqual(key, StateKey("job42/actor", "model.layers.3.mlp.up_proj.weight", "param", (0, 0), (4096, 1024), "bf16", 17))
        self.assertEqual(key.nbytes, 4096 * 1024 * 2)
        self.assertEqual(str(key), EXAMPLE)

    def test_formats_with_default_offsets_and_roles(self) -> None:
        self.assertEqual(format_key("job42/actor", "model.layers.3.mlp.up_proj.weight", shape=[4096, 1024], dtype="bf16", version=17), EXAMPLE)
        self.assertEqual(format_key("j", "opt", role="optim.exp_avg_sq", offsets=[128], shape=[64], dtype="f32", version=0),
                         "j/opt:optim.exp_avg_sq@[128]/[64]:f32#v0")
        scalar = format_key("j/k", "step", role="buffer", shape=[], dtype="i64", version=2)
        self.assertEqual(scalar, "j/k/step:buffer@[]/[]:i64#v2")
        self.assertEqual(parse_key(scalar).nbytes, 8, "a scalar is one element")
        self.assertEqual(parse_key(EXAMPLE).with_version(18).text, EXAMPLE.replace("#v17", "#v18"))

    def test_every_dtype_has_its_size(self) -> None:
        for dtype, size in DTYPE_BYTES.items():
            self.assertEqual(parse_key(f"n/t:grad@[0,0]/[3,5]:{dtype}#v1").nbytes, 15 * size, dtype)

    def test_torch_dtypes_map_by_name_without_importing_torch(self) -> None:
        class FakeDtype:  # str() is all key_dtype looks at
            def __init__(self, name: str) -> None:
                self.name = name

            def __str__(self) -> str:
                return self.name

        self.assertEqual(key_dtype(FakeDtype("torch.bfloat16")), "bf16")
        self.assertEqual(key_dtype(FakeDtype("torch.float8_e4m3fn")), "f8_e4m3")
        self.assertEqual(key_dtype("u8"), "u8")
        with self.assertRaises(AgentError) as caught:
            key_dtype(FakeDtype("torch.complex64"))
        self.assertEqual(caught.exception.code, "ERR_KEY_INVALID")

    def test_rejects_with_the_reason(self) -> None:
        self.assertInvalid("", "length must be 1..1024")
        self.assertInvalid(42, "must be a string")
        self.assertInvalid("j/a" * 400 + "/w:param@[0]/[1]:u8#v1", "length must be 1..1024")
        self.assertInvalid("nocolon", "expected <namespace>/<fqn>")
        self.assertInvalid("w:param@[0]/[1]:u8#v1", "missing namespace")
        self.assertInvalid("j//w:param@[0]/[1]:u8#v1", "may only contain")
        self.assertInvalid("j/w:weights@[0]/[1]:u8#v1", "role must be")
        self.assertInvalid("j/w:param@[01]/[1]:u8#v1", "without leading zeros")
        self.assertInvalid("j/w:param@[0]/[1]:u8", "missing #v")
        self.assertInvalid("j/w:param@[0]/[1]:u8#v01", "version must be")
        self.assertInvalid("j/w:param@[0]/[1]:f128#v1", 'unknown dtype "f128"')
        self.assertInvalid("j/w:param@[0,0]/[1]:u8#v1", "rank 2 but the shape has rank 1")
        self.assertInvalid("j/w:param@[0]/[0]:u8#v1", "every shape dimension must be >= 1")
        self.assertInvalid("j/w:param@[" + ",".join("0" * 9) + "]/[" + ",".join("1" * 9) + "]:u8#v1", "rank 9 exceeds 8")
        self.assertInvalid(f"j/w:param@[0]/[{2**53}]:u8#v1", "too large")
        self.assertInvalid("j/w:param@[0]/[1]:u8#v1\n", "")  # no trailing newline slips through

    def test_construction_validates_fields(self) -> None:
        for bad in [dict(namespace="a b"), dict(fqn="has/slash"), dict(role="optim."), dict(offsets=(1.5,)),
                    dict(version=-1), dict(version=True), dict(shape=(2, 0)), dict(dtype="f128")]:
            fields = dict(namespace="j", fqn="w", role="param", offsets=(0, 0), shape=(2, 3), dtype="f32", version=1)
            fields.update(bad)  # type: ignore[arg-type]
            with self.subTest(bad=bad), self.assertRaises(AgentError) as caught:
                StateKey(**fields)  # type: ignore[arg-type]
            self.assertEqual(caught.exception.code, "ERR_KEY_INVALID")

    def test_random_keys_round_trip(self) -> None:
        rng = random.Random(4)
        alphabet = "abcXYZ019_.-"
        word = lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))  # noqa: E731
        for _ in range(500):
            rank = rng.randint(0, 8)
            key = StateKey("/".join(word() for _ in range(rng.randint(1, 3))), word(),
                           rng.choice(["param", "grad", "buffer", "optim." + word().replace(".", "_").replace("-", "_")]),
                           tuple(rng.randint(0, 10**6) for _ in range(rank)), tuple(rng.randint(1, 9) for _ in range(rank)),
                           rng.choice(list(DTYPE_BYTES)), rng.randint(0, 10**9))
            self.assertEqual(parse_key(key.text), key)


if __name__ == "__main__":
    unittest.main()
