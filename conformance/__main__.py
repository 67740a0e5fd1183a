import sys

from conformance.run import main

sys.exit(main())
