import sys

from compass.runtime.stage_cli import main

sys.exit(main("genrm"))
