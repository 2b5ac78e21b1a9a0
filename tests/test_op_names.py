"""The op, attribute and pass names the PIR pass (passes/) and the ops (custom_ops/paddle/) share
come from one header, custom_ops/op_names.h: every name there is what the loaded extension
registers, and no other C++ file spells one of them as a string literal."""
import glob
import os
import re

import pytest
from conftest import ROOT

from paddle_vtensor import _op_names
from paddle_vtensor._build import BENCH_ONLY_SOURCE

HEADER = os.path.join(ROOT, "custom_ops", "op_names.h")


def _header():
    with open(HEADER) as f:
        text = f.read()
    ops = dict(re.findall(r"#define (PVT_OP_\w+) (\w+)", text))
    attrs = dict(re.findall(r'#define (PVT_ATTR_\w+) "(\w+)"', text))
    passes = dict(re.findall(r"#define (PVT_PASS_\w+) (\w+)", text))
    return text, ops, attrs, passes


def _registered_attrs(op: str) -> list[str]:
    from paddle.utils.cpp_extension.extension_utils import parse_op_info

    _inputs, attrs, _outputs = parse_op_info(op)
    return attrs


def test_every_op_in_the_header_is_registered_with_header_attributes(ops):
    _, names, attrs, _ = _header()
    assert set(names.values()) == {"vtensor_append", "vtensor_reserve_one_token", "vtensor_truncate",
                                   "vtensor_decode_attention_lse", "vtensor_merge_attention_states",
                                   "vtensor_slot_attention", "vtensor_slot_cache", "vtensor_slot_errors",
                                   "vtensor_speculative_accept",
                                   "vtensor_from_dense", "vtensor_decode_attention",
                                   "vtensor_quant_from_dense", "vtensor_quant_append",
                                   "vtensor_quant_decode_attention", "vtensor_quant_slot_attention"}
    header_attrs = set(attrs.values())
    for op in names.values():
        registered = _registered_attrs(op)  # raises for an op the loaded extension does not register
        assert set(registered) <= header_attrs, (op, registered)
    assert _registered_attrs("vtensor_append") == ["max_seq_len", "chunk_bytes"]
    assert _registered_attrs("vtensor_truncate") == ["seq_len"]
    assert _registered_attrs("vtensor_decode_attention") == ["scale"]


def test_the_pass_in_the_header_is_registered(ops):
    import paddle

    from paddle_vtensor import passes

    _, _, _, pass_names = _header()
    assert list(pass_names.values()) == [passes.PASS_NAME]
    paddle.pir.PassManager().add_pass(passes.PASS_NAME, {})  # raises when no pass has that name


@pytest.mark.parametrize("folder", ["passes", os.path.join("custom_ops", "paddle")])
def test_no_other_file_spells_a_shared_name(folder):
    _, ops, attrs, pass_names = _header()
    spelled = set(ops.values()) | set(attrs.values()) | set(pass_names.values())
    files = glob.glob(os.path.join(ROOT, folder, "*.cc")) + glob.glob(os.path.join(ROOT, folder, "*.h"))
    # bench-host's own extension: bench-only ops with names of their own, never in the library
    files = [f for f in files if os.path.relpath(f, ROOT) != BENCH_ONLY_SOURCE]
    assert files
    offenders = []
    for path in files:
        with open(path) as f:
            code = "\n".join(line.split("//", 1)[0] for line in f)  # comments may name them
        for literal in re.findall(r'"([^"\\]*)"', code):
            for name in spelled:
                if re.fullmatch(rf"{name}(:.*)?", literal.strip()):
                    offenders.append(f"{os.path.relpath(path, ROOT)}: \"{literal}\"")
        if "PD_BUILD_OP(" in code or "REGISTER_IR_PASS(" in code.replace("PVT_REGISTER_IR_PASS(", ""):
            offenders.append(f"{os.path.relpath(path, ROOT)}: registers by a literal name, not PVT_BUILD_OP")
    assert not offenders, offenders


def test_the_python_mirror_is_the_header_exactly():
    """paddle_vtensor/_op_names.py holds every PVT_OP_/PVT_ATTR_/PVT_PASS_ name of op_names.h with
    its value, and nothing else of that kind (both directions), plus the pass's quiet option."""
    text, ops, attrs, passes = _header()
    header = {**ops, **attrs, **passes}
    mirror = {k: v for k, v in vars(_op_names).items() if re.fullmatch(r"PVT_(OP|ATTR|PASS)_\w+", k)}
    assert mirror == header
    # every define of that kind is caught by the patterns above (none in another spelling)
    assert len(re.findall(r"#define PVT_(?:OP|ATTR|PASS)_", text)) == len(header)
    assert re.search(r'kPassQuiet\[\] = "(\w+)"', text).group(1) == _op_names.PASS_OPTION_QUIET


def test_python_spells_no_name_outside_the_mirror():
    """No module of the package but _op_names.py writes an op or pass name as a string constant
    (attribute names are ordinary words, "scale", "layer": the ops take attributes by position)."""
    import ast

    _, ops, _, passes = _header()
    names = set(ops.values()) | set(passes.values())
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "paddle_vtensor", "**", "*.py"), recursive=True):
        if path.endswith("_op_names.py"):
            continue
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {node.value!r}")
    assert not offenders, offenders
