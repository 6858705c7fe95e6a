#!/usr/bin/env python3
"""Write the seed corpora of tests/fuzz/corpus/<harness>/ (small valid
inputs and a few edge cases, in each harness's input format: see the
comment at the top of fuzz_<harness>.c). Run once; the files are
committed, and inputs that found bugs are added beside them by name."""
import gzip
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def put_each(harness, mode, texts):
    """One seed per name of `texts`: the harness's mode byte, then the text."""
    for name, text in texts.items():
        put(harness, name, mode + text.encode())


def wire():
    hdr = json.dumps({"msg_id": "a1", "session": "s", "username": "u", "date": "2026-01-01T00:00:00Z",
                      "msg_type": "execute_request", "version": "5.3"})
    content = json.dumps({"code": "int x = 1;", "silent": False, "store_history": True,
                          "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
    ok = ["id1", "<IDS|MSG>", "0" * 64, hdr, "{}", "{}", content]
    for mode, tag in ((1, "signed"), (0, "badsig"), (2, "nokey")):
        put("wire", "execute_" + tag, bytes([mode]) + "\n".join(ok).encode())
    put("wire", "signed_buffers", b"\x01" + "\n".join(ok + ["buf1", "\x00\x01"]).encode())
    put("wire", "signed_noid", b"\x01" + "\n".join(ok[1:]).encode())
    put("wire", "signed_nomsgtype", b"\x01" + "\n".join(["<IDS|MSG>", "", '{"msg_id":"x"}', "{}", "{}", "{}"]).encode())
    put("wire", "signed_notobject", b"\x01" + "\n".join(["<IDS|MSG>", "", "[1,2]", "{}", "{}", "{}"]).encode())
    put("wire", "nodelim", b"\x00a\nb\nc")
    put("wire", "short", b"\x01<IDS|MSG>\nsig\n{}")
    put("wire", "nul_string", b"\x02<IDS|MSG>\n\n{\"msg_type\":\"a\\u0000b\"}\n{}\n{}\n{}")


def split():
    put_each("split", b"\x00", {
        "preproc": "#include <stdio.h>\n#define N 10\n#pragma once\n",
        "types": "typedef struct point { int x, y; } point_t;\nstruct s { float f; };\nenum e { A, B = 2 };\ntypedef int (*fn)(int);\n",
        "function": "static inline int sq(int x) { return x * x; }\nint proto(void);\nextern int ext;\n",
        "variables": "int a = 1, *p = &a, arr[3] = {1, 2, 3};\nconst char *s = \"a;b\", c = ';';\nT_t *t;\n",
        "statements": "for (int i = 0; i < 3; i++) { printf(\"%d\\n\", i); }\nif (a) a++; else a--;\nsq(3)",
        "comments": "/* a { */ int x; // } \n/** doc */\nint f(void) { return '}'; }\n",
        "pragma_for": "#pragma omp parallel for\nfor (int i = 0; i < 4; i++) {}\n",
        "unbalanced": "int f() { if (1) { }\n",
        "unterminated": "/* never ends\nint x;",
        "string_open": "char *s = \"abc;\n",
    })
    put_each("split", b"\x01", {
        "cxx_template": "template <typename T> T twice(T x) { return 2 * x; }\nnamespace n { int v; }\nusing std::vector;\n",
        "cxx_kernel": "__global__ void k(float *x) { x[threadIdx.x] = 0; }\n__device__ int d;\nextern \"C\" int g(void);\nstatic_assert(1, \"ok\");\n",
        "cxx_class": "class C { public: int m() { return 1; } };\nstruct S : C { };\nk<<<1, 32>>>(p);\n",
    })


def options():
    put_each("options", b"\xff", {
        "minimal": "num_processes=2",
        "all": "num_processes=4 mixed_precision=fp16 use_port=29501 master_addr=127.0.0.1 node_rank=0 "
               "num_nodes=1 rdzv_backend=static rdzv_id=job1 rdzv_timeout=30 max_restarts=0 "
               "monitor_interval=0.5 log_line_prefix_template='[{rank}/{local_rank}/{node_rank}] '",
        "endpoint": "num_processes=2 num_nodes=2 node_rank=1 rdzv_endpoint=host.example:1234",
        "secret": "num_processes=2 rdzv_conf=secret=alpha",
        "quoted": "num_processes=\"2\" mixed_precision='bf16' rdzv_id=\"a b\"",
        "bad_value": "num_processes=0",
        "dup": "num_processes=2 num_processes=3",
        "unknown": "num_procs=2",
        "unterminated": "num_processes=2 rdzv_id='abc",
        "big": "num_processes=99999999999999999999 use_port=-1",
    })
    put("options", "short_err", b"\x07num_processes=x")


def store():
    put("store", "set_get", "SET\tk\tv\nGET\tk\t\nCHECK\tk\t\nDEL\tk\t\nCHECK\tk\t")
    put("store", "wait_then_set", "GET\tlate\t\nWAIT\tlate2\t\nSET\tlate\t1\nSET\tlate2\t2")
    put("store", "add", "ADD\tc\t1\nADD\tc\t-5\nADD\tc\t9223372036854775806\nGET\tc\t")
    put("store", "add_bad", "SET\tc\tabc\nADD\tc\t1\nADD\td\tx\nADD\te\t")
    put("store", "malformed", "SET\tk\nSET\t\tv\nBOGUS\tk\tv\nSET\tk\tv\tx\tx\tx\tx\nSETSETSETSETSETSET\tk\tv")
    put("store", "nul_key", b"SET\tk\x00y\tv\nGET\tk\x00\t")


def idx():
    labels = bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + bytes([0, 1, 2, 3, 4])
    images = bytes([0, 0, 8, 3]) + struct.pack(">III", 2, 2, 2) + bytes(range(8))
    put("idx", "labels", b"\x00" + labels)
    put("idx", "images", b"\x00" + images)
    put("idx", "labels_gz", b"\x01" + labels)
    put("idx", "images_gzfile", b"\x00" + gzip.compress(images))
    put("idx", "four_dims", b"\x00" + bytes([0, 0, 8, 4]) + struct.pack(">IIII", 1, 1, 2, 1) + b"ab")
    put("idx", "truncated", b"\x00" + bytes([0, 0, 8, 1]) + struct.pack(">I", 100) + b"abc")
    put("idx", "trailing", b"\x00" + labels + b"x")
    put("idx", "float_type", b"\x00" + bytes([0, 0, 0x0d, 1]) + struct.pack(">I", 1) + b"\0\0\0\0")


def section(name, data):
    return name.encode().ljust(32, b"\0") + struct.pack("<Q", len(data)) + data


def checkpoint_header(payload, kind):
    return (b"NBFSTATE" + struct.pack("<IIII", 1, 0x01020304, kind, 0) + struct.pack("<Q", len(payload))
            + struct.pack("<II", zlib.crc32(payload), 0) + payload)


def checkpoint():
    nparams = 6 * 5 + 5 + 5 * 3 + 3
    floats = struct.pack("<%df" % nparams, *[0.01 * i for i in range(nparams)])
    scaler = struct.pack("<fffii", 1.0, 2.0, 0.5, 2000, 0)
    sgd = struct.pack("<iiiiQffffffq", 0, 1, 0, 0, nparams, 0.1, 0.9, 0.0, 0.9, 0.999, 1e-8, 0)
    adam = struct.pack("<iiiiQffffffq", 1, 1, 1, 0, nparams, 0.1, 0.9, 0.0, 0.9, 0.99, 1e-8, 3)
    rng = struct.pack("<4Qqd", 1, 2, 3, 4, 0, 0.0)
    accum = struct.pack("<iiiiQ", 3, 1, 1, 0, 0)
    accum_prev = struct.pack("<iiiiQ", 3, 0, 0, 0, 2)
    sizes = struct.pack("<3i", 6, 5, 3)
    counter = struct.pack("<i", 7)
    shared_min = section("scaler", scaler) + section("user.counter", counter)
    shared_full = (section("scaler", scaler) + section("model.sizes", sizes) + section("model.params", floats)
                   + section("optim", sgd) + section("optim.m", floats) + section("user.counter", counter))
    shared_adam = (section("scaler", scaler) + section("model.sizes", sizes) + section("model.params", floats)
                   + section("optim", adam) + section("optim.m", floats) + section("optim.v", floats)
                   + section("user.counter", counter))
    rank_min = section("rng", rng) + section("rng.global", rng) + section("accum", accum)
    rank_full = rank_min + section("model.grads", floats)
    rank_prev = (section("rng", rng) + section("rng.global", rng) + section("accum", accum_prev)
                 + section("accum.prev", b"\0" * 8) + section("model.grads", floats))

    def inp(flags, shared, rank):
        return bytes([flags]) + struct.pack("<H", len(shared)) + shared + rank

    put("checkpoint", "wrapped_min", inp(3, shared_min, rank_min))
    put("checkpoint", "wrapped_model_sgd", inp(3 | 4 | 8, shared_full, rank_full))
    put("checkpoint", "wrapped_model_adam", inp(3 | 4 | 8 | 16, shared_adam, rank_full))
    put("checkpoint", "wrapped_accum_prev", inp(3 | 4, shared_full, rank_prev))
    put("checkpoint", "raw_files", inp(4 | 8, checkpoint_header(shared_full, 0), checkpoint_header(rank_full, 1)))
    put("checkpoint", "wrapped_bad_table", inp(3, section("scaler", scaler)[:-4], rank_min))
    put("checkpoint", "raw_bad_crc", inp(0, checkpoint_header(shared_min, 0)[:-1] + b"x", checkpoint_header(rank_min, 1)))
    put("checkpoint", "raw_wrong_kind", inp(0, checkpoint_header(shared_min, 1), checkpoint_header(rank_min, 0)))


def config():
    put("config", "default", """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
gpu_ids: all
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: 29500
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 4
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
""")
    put("config", "mpirun", "distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_ccl: 1\n  mpirun_hostfile: /tmp/hosts\nnum_processes: 2\n")
    put("config", "unsupported", "deepspeed_config:\n  zero_stage: 2\ndistributed_type: DEEPSPEED\n")
    put("config", "flow", "{num_processes: 2, rdzv_conf: 'secret=x', log_line_prefix_template: '{rank}: '}\n")
    put("config", "anchors", "a: &x 1\nnum_processes: *x\n? [1, 2]\n: v\n")
    put("config", "empty", "")
    put("config", "list_root", "- 1\n- 2\n")
    put("config", "bad_yaml", "num_processes: [1, 2\n")


def trainer_state():
    st = {"best_metric": None, "best_model_checkpoint": None, "epoch": 1.0, "eval_steps": 10,
          "global_step": 20, "is_hyper_param_search": False, "is_local_process_zero": True,
          "is_world_process_zero": True,
          "log_history": [{"epoch": 0.5, "grad_norm": 1.25, "learning_rate": 5e-05, "loss": 2.3026, "step": 10},
                          {"epoch": 1.0, "eval_accuracy": 0.5, "eval_loss": 1.5, "eval_runtime": 0.01, "step": 20},
                          {"epoch": 1.0, "step": 20, "total_flos": 0.0, "train_loss": 2.0, "train_runtime": 1.5}],
          "logging_steps": 10, "max_steps": 20, "num_input_tokens_seen": 0, "num_train_epochs": 1,
          "save_steps": 500, "stateful_callbacks": {}, "total_flos": 0.0, "train_batch_size": 8}
    put("trainer_state", "valid", json.dumps(st, indent=2, sort_keys=True) + "\n")
    put("trainer_state", "python_floats", '{"log_history": [{"loss": NaN, "x": Infinity, "y": -Infinity, "step": 1}]}')
    put("trainer_state", "nulls", '{"log_history": [{"loss": null, "step": null}, 3, [], {}]}')
    many = {"log_history": [{("m%d" % i): i for i in range(20)} | {"step": 5}]}
    put("trainer_state", "many_metrics", json.dumps(many))
    put("trainer_state", "long_key", json.dumps({"log_history": [{"k" * 100: 1.0, "step": 1e300}]}))
    put("trainer_state", "not_list", '{"log_history": {"a": 1}}')


for fn in (wire, split, options, store, idx, checkpoint, config, trainer_state):
    fn()
