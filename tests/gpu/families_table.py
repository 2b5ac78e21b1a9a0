"""The markdown family table of docs/H200_DECODE_PARITY.md from bench_families.py's JSON (no GPU needed).

One row per (family, B, S, Tq): the best SDPA backend and its time, ours per-slot and seq-major as a
ratio to it, for each dtype; then counts against the goal (within 1.05x, none above 1.10x) and the rows
above 1.10x. Where no SDPA backend took a shape, the ratio column holds ours' share of the copy rate.
Usage: python3 tests/gpu/families_table.py FAMILIES.json
"""
import json
import sys


def ratio(r, lay):
    if lay + "_vs_best" in r:
        return f"{r[lay + '_vs_best']:.3f}"
    if lay + "_pct_copy" in r:
        return f"({r[lay + '_pct_copy']:.0f}% copy)"
    return "-"


def main():
    data = json.load(open(sys.argv[1]))
    rows = data["rows"]
    dtypes = sorted({r["dtype"] for r in rows}, key=lambda d: d != "fp16")
    keyed = {}
    for r in rows:
        keyed.setdefault((r["family"], r["q_heads"], r["kv_heads"], r["head_dim"], r["B"], r["S"], r["Tq"]), {})[r["dtype"]] = r
    has_plan = any("plan_slot" in r for r in rows)  # recorded since the second run of issue 32
    head = "| family (Hq/Hkv, D) | B | S | Tq |" + (" per-slot plan |" if has_plan else "")
    rule = "|---|---:|---:|---:|" + ("---|" if has_plan else "")
    for dt in dtypes:
        head += f" {dt} best SDPA µs | {dt} slot / best | {dt} seq / best |"
        rule += "---:|---:|---:|"
    print(head)
    print(rule)
    for (fam, hq, hkv, d, B, S, tq), by in keyed.items():
        plan = next((r.get("plan_slot") for r in by.values() if r.get("plan_slot")), None)
        line = f"| {fam} ({hq}/{hkv}, {d}) | {B} | {S} | {tq} |" + (f" {plan} |" if has_plan else "")
        for dt in dtypes:
            r = by.get(dt)
            if r is None:
                line += " - | - | - |"
                continue
            best = f"{r['sdpa_best_us']:.2f} {r['sdpa_best'].replace('sdpa_', '')}" if "sdpa_best" in r else "none"
            line += f" {best} | {ratio(r, 'slot')} | {ratio(r, 'seq')} |"
        print(line)
    for lay in ("slot", "seq"):
        vs = [r[lay + "_vs_best"] for r in rows if lay + "_vs_best" in r]
        print(f"\n{lay}: {len(vs)} rows with an SDPA backend; within 1.05x: {sum(v <= 1.05 for v in vs)}; "
              f"within 1.10x: {sum(v <= 1.10 for v in vs)}; median {sorted(vs)[len(vs) // 2]:.3f}; max {max(vs):.3f}")
    worst = sorted((r for r in rows if r.get("slot_vs_best", 0) > 1.10), key=lambda r: -r["slot_vs_best"])
    print("\nPer-slot rows above 1.10x: " + "; ".join(
        f"{r['family']} {r['dtype']} B={r['B']} S={r['S']} Tq={r['Tq']}: {r['slot_vs_best']:.2f} "
        f"({r['ours_slot_us']:.1f} vs {r['sdpa_best_us']:.1f} µs {r['sdpa_best'].replace('sdpa_', '')})" for r in worst))
    none = [r for r in rows if "sdpa_best" not in r]
    if none:
        print("\nNo SDPA backend: " + "; ".join(
            f"{r['family']} {r['dtype']} B={r['B']} S={r['S']}: {r.get('slot_pct_copy', '-')}% of copy" for r in none))


if __name__ == "__main__":
    main()
