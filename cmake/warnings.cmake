# The warning list from docs/design/style.md (bubblewrap's -Werror= list, adapted).
set(SBX_WARNINGS
  -Wall -Wextra -Werror
  -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wformat-security
  -Wswitch-default -Wpointer-arith -Wundef -Wcast-align -Wwrite-strings
  -Wmissing-declarations -Wnested-externs -Wold-style-definition
  -Wvla -Wimplicit-fallthrough -Wnull-dereference -Wno-unused-parameter)
