# SPDX-License-Identifier: Apache-2.0
from nttrace.cli import main

raise SystemExit(main())
