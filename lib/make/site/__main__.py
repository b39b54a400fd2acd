import sys

from lib.make.site.build import main

sys.exit(main())
