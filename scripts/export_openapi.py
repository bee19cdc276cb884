"""Write the OpenAPI documents of the service and the agent to openapi/.

`python scripts/export_openapi.py` rewrites them; `--check` exits 1 if they are stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "openapi"


def documents() -> dict[str, str]:
    from remote_agent.app import create_app as create_agent
    from remote_agent.settings import AgentSettings
    from service.app import create_app as create_service
    from service.settings import ServiceSettings

    agent = create_agent(AgentSettings(db_url="sqlite:///nonexistent/for-openapi.db"))
    service = create_service(ServiceSettings(), start_spark=False)
    return {
        name: json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"
        for name, app in (("agent.json", agent), ("service.json", service))
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name, text in documents().items():
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale OpenAPI documents: {', '.join(stale)}; run: python scripts/export_openapi.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
