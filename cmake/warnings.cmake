# The warning list (bubblewrap's -Werror= list, adapted; docs/design/style.md says how we write C).
set(SBX_WARNINGS
  -Wall -Wextra -Werror
  -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wformat-security
  -Wswitch-default -Wpointer-arith -Wundef -Wcast-align -Wwrite-strings
  -Wmissing-declarations -Wnested-externs -Wold-style-definition
  -Wvla -Wimplicit-fallthrough -Wnull-dereference -Wno-unused-parameter)
