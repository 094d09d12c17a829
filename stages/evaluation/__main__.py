import sys

from stages.common.stage_cli import main

sys.exit(main("evaluation"))
