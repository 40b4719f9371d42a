/* libFuzzer target for the D-Bus reply decoder of the systemd cgroup manager
 * (src/backends/linux/cgroup-systemd.c), which reads what arrives on systemd's private socket
 * in the launcher (host root).
 *
 * Input: bytes as read from the socket. Oracles:
 * - the message size is 0 (not a message) or at least its 16-byte fixed header;
 * - a complete message decodes to -1 (malformed), 1 (not our reply) or 0 (our reply), and only
 *   an error reply sets the error text, which is a string;
 * - the decoder reads nothing past the message (ASan), and nothing leaks (LeakSanitizer).
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_dbus_reply fuzz/corpus/dbus_reply */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "linux.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  size_t total = sbx__dbus_message_size(data, size);
  if (total != 0 && total < 16)
    abort();
  if (total == 0 || total > size)
    return 0;
  /* an exact copy, so that ASan sees any read past the message */
  uint8_t *copy = malloc(total);
  memcpy(copy, data, total);
  char *error = NULL;
  int r = sbx__dbus_parse_reply(copy, total, 1, &error);
  if (r < -1 || r > 1 || (r != 0 && error != NULL) || (error && copy[1] != 3))
    abort();
  if (error && strlen(error) == 0)
    abort();
  free(error);
  free(copy);
  return 0;
}
