"""nftables through its JSON interface (`nft -j`), inside a node's namespace."""

from __future__ import annotations

import json

from twin.errors import RuntimeBackendError
from twin.lab.runtime import Runtime


def apply(runtime: Runtime, node: str, commands: list[dict]) -> None:
    """Run a batch of nft JSON commands atomically (`nft -j -f -`)."""
    result = runtime.exec(node, ["nft", "-j", "-f", "-"], input=json.dumps({"nftables": commands}))
    if result.rc != 0:
        raise RuntimeBackendError(f"nft on {node} failed: {result.stderr.strip()}")


def ruleset(runtime: Runtime, node: str) -> list[dict]:
    """The node's whole ruleset as nft JSON objects (without the metainfo header)."""
    result = runtime.exec(node, ["nft", "-j", "list", "ruleset"])
    if result.rc != 0:
        raise RuntimeBackendError(f"nft on {node} failed: {result.stderr.strip()}")
    return [o for o in json.loads(result.stdout or '{"nftables": []}')["nftables"] if "metainfo" not in o]


def delete_table(runtime: Runtime, node: str, family: str, name: str) -> None:
    if any(o.get("table", {}).get("name") == name and o["table"]["family"] == family
           for o in ruleset(runtime, node)):
        apply(runtime, node, [{"delete": {"table": {"family": family, "name": name}}}])


def counters(runtime: Runtime, node: str, family: str, table: str) -> list[dict]:
    """Packet/byte counters of every rule with a counter in `table`."""
    found = []
    for obj in ruleset(runtime, node):
        rule = obj.get("rule")
        if rule and rule["table"] == table and rule["family"] == family:
            for expr in rule["expr"]:
                if "counter" in expr and isinstance(expr["counter"], dict):
                    found.append({"chain": rule["chain"], **expr["counter"]})
    return found


def table_name(fault_id: str) -> str:
    return "ftw_" + fault_id.replace("-", "_")


def device_chain(table: str, ifname: str, hook: str) -> tuple[str, list[dict]]:
    """Commands creating table `table` (netdev family) with a chain on `ifname`'s ingress or
    egress hook, ahead of anything else on the device; returns (chain name, commands)."""
    chain = f"{'in' if hook == 'ingress' else 'out'}_{ifname}".replace("-", "_")
    return chain, [
        {"add": {"table": {"family": "netdev", "name": table}}},
        {"add": {"chain": {"family": "netdev", "table": table, "name": chain, "type": "filter",
                           "hook": hook, "dev": ifname, "prio": -300, "policy": "accept"}}},
    ]


def rule(table: str, chain: str, exprs: list[dict]) -> dict:
    return {"add": {"rule": {"family": "netdev", "table": table, "chain": chain, "expr": exprs}}}
