from nttrace.cli import main

raise SystemExit(main())
