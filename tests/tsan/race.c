/* tests/tsan/run.sh's positive control: a data race ThreadSanitizer must report, through the same
 * TSAN_OPTIONS (report folder, suppressions) as the suites, or the run is not checking anything. */
#include <pthread.h>
#include <stdio.h>

static int counter;

static void *bump(void *arg)
{
  counter++;
  return arg;
}

int main(void)
{
  pthread_t t;
  if (pthread_create(&t, NULL, bump, NULL) != 0)
    return 2;
  counter++;
  pthread_join(t, NULL);
  printf("%d\n", counter);
  return 0;
}
