"""Which of vLLM's registered architectures run pipeline parallel, as vLLM itself answers it.

vLLM 0.26 refuses ``pipeline_parallel_size`` > 1 at engine start for a model class without the
``SupportsPP`` interface (config/model.py ``verify_with_parallel_config``: "Pipeline parallelism
is not supported for this model"), and whether a class has it is vLLM's own function
(model_executor/models/interfaces.py ``supports_pp``: the protocol's attributes and a
``forward`` that takes ``intermediate_tensors``), read by the registry for the class each
architecture name maps to (model_executor/models/registry.py ``_VLLM_MODELS``, each module
named as the registry names it, ``_resolve_module_name``, and ``_ModelInfo.from_model_cls``).
Whether it has it is a property of code, not of text a parser could read: bases come from other
modules and mixins, the protocol is matched by attributes. So this imports every registered
class and asks ``supports_pp``, in the e2e venv (the image's vLLM; the main venv has none):

    "$(.venv/bin/python -m tools.e2e_requirements venv)/bin/python" -m tools.vllm_pipeline_parallel

writes catalog/vllm_pipeline_parallel.json; ``--check`` compares instead (`make e2e`,
tests/e2e/test_model_parallel_vllm.py). A class whose module does not import there (a
dependency the venv lacks) is listed with the error, and judged by no rule.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "catalog" / "vllm_pipeline_parallel.json"


def inspect_registry() -> dict[str, Any]:
    """Each registered architecture, by vLLM's ``supports_pp`` on the class it maps to."""
    import vllm
    from vllm.model_executor.models import registry
    from vllm.model_executor.models.interfaces import supports_pp

    supported, unsupported, not_inspected = [], [], {}
    for architecture, (module, class_name) in sorted(registry._VLLM_MODELS.items()):
        try:
            imported = importlib.import_module(registry._resolve_module_name(module))
            model_class = getattr(imported, class_name)
        except Exception as error:  # any import failure: listed, and not judged
            # without the file paths in the message: the catalog is the same on every machine
            said = re.sub(r" \(/[^)]*\)", "", str(error)).splitlines()[0]
            not_inspected[architecture] = f"{type(error).__name__}: {said}"[:200]
            continue
        (supported if supports_pp(model_class) else unsupported).append(architecture)
    return {
        "vllm_version": vllm.__version__,
        "generated_by": "tools/vllm_pipeline_parallel.py",
        "supports_pipeline_parallel": supported,
        "without_pipeline_parallel": unsupported,
        "not_inspected": not_inspected,
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.vllm_pipeline_parallel")
    parser.add_argument("--check", action="store_true", help="compare with the catalog")
    options = parser.parse_args(argv)
    text = render(inspect_registry())
    if options.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} differs from what the installed vLLM answers", file=sys.stderr)
            return 1
        print(f"{OUTPUT}: as the installed vLLM answers")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
