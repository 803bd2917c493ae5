from jaxrl_async.cli import main

raise SystemExit(main())
