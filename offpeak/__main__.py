import sys

from offpeak.cli import main

sys.exit(main())
