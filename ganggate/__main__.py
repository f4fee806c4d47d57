from ganggate.cli import main

raise SystemExit(main())
