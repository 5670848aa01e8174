"""The few `helm` commands benchfleet's deployment guide (docs/deploy.md) uses, through the Helm v4 engine from PyPI
(helm-python-sdk): what `scripts/helm` runs where no helm binary is installed. Same arguments and meaning as helm's;
values files merge in order and `--set` (Helm's own parser) wins over them."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

try:
    import helm_python as helm
except ImportError:
    sys.exit("scripts/helm: neither a helm binary nor helm-python-sdk is installed (pip install helm-python-sdk)")


def seconds(text: str) -> int:
    """Helm's durations: 300s, 5m, 1m30s, 1h."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if not text or parts is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 5m, 300s)")
    h, m, s = (int(p or 0) for p in parts.groups())
    return h * 3600 + m * 60 + s


def merged(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merged(into[key], value)
        else:
            into[key] = value
    return into


def values(files: list[str], sets: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in files:
        merged(out, helm.values_from_yaml(Path(name).read_text()) or {})
    for expression in sets:
        merged(out, helm.parse_set_string(expression))
    return out


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="scripts/helm", description=__doc__)
    top.add_argument("-n", "--namespace", default=None)
    commands = top.add_subparsers(dest="command", required=True)
    for name in ("install", "upgrade"):
        cmd = commands.add_parser(name)
        cmd.add_argument("release")
        cmd.add_argument("chart")
        cmd.add_argument("-f", "--values", action="append", default=[])
        cmd.add_argument("--set", action="append", default=[])
        cmd.add_argument("--wait", action="store_true")
        cmd.add_argument("--timeout", type=seconds, default=300)
        cmd.add_argument("-n", "--namespace", default=None)
        if name == "upgrade":
            cmd.add_argument("-i", "--install", action="store_true")
    for name in ("uninstall", "status"):
        cmd = commands.add_parser(name)
        cmd.add_argument("release")
        cmd.add_argument("-n", "--namespace", default=None)
        if name == "uninstall":
            cmd.add_argument("--wait", action="store_true")
            cmd.add_argument("--timeout", type=seconds, default=300)
    return top


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    namespace = args.namespace or "default"
    wait = "watcher" if getattr(args, "wait", False) else None
    try:
        with helm.Config(kubeconfig_path=kubeconfig, namespace=namespace) as cfg:
            if args.command == "install" or (args.command == "upgrade" and args.install and not _exists(cfg, args.release)):
                release = cfg.install(args.chart, args.release, values(args.values, args.set), wait=wait, timeout=args.timeout)
            elif args.command == "upgrade":
                release = cfg.upgrade(args.chart, args.release, values(args.values, args.set), wait=wait, timeout=args.timeout)
            elif args.command == "uninstall":
                cfg.uninstall(args.release, wait=wait, timeout=args.timeout)
                print(f'release "{args.release}" uninstalled')
                return 0
            else:
                release = cfg.status(args.release)
    except helm.HelmError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(f"NAME: {release['name']}\nNAMESPACE: {release['namespace']}\nSTATUS: {release['status']}")
    print(f"REVISION: {release['revision']}\nDEPLOYED: {release['deployed_at']}")
    return 0


def _exists(cfg: Any, release: str) -> bool:
    try:
        cfg.status(release)
    except helm.HelmNotFoundError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
