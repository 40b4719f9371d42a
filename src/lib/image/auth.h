/* Registry authentication: the WWW-Authenticate challenge (RFC 7235: Bearer realm=...,
 * service=..., scope=... or Basic realm=...), the token server's answer, and credentials from a
 * Docker-style `auths` file. Pure parsers (fuzz/fuzz_auth_challenge.c) and one file read. */
#ifndef SBX_IMAGE_AUTH_H
#define SBX_IMAGE_AUTH_H

#include <stddef.h>

#include "error.h"

#define SBX_AUTH_HEADER_MAX 4096
#define SBX_AUTH_TOKEN_MAX (64u << 10)

enum sbx_auth_scheme { SBX_AUTH_NONE, SBX_AUTH_BASIC, SBX_AUTH_BEARER };

struct sbx_auth_challenge {
  enum sbx_auth_scheme scheme;
  char *realm, *service, *scope; /* NULL when absent */
};

/* The first Basic or Bearer challenge of a WWW-Authenticate value (other schemes are skipped).
 * A Bearer challenge needs an http(s) realm. SBX_E_INVALID when there is none usable. */
int sbx__auth_challenge_parse(const char *hdr, size_t len, struct sbx_auth_challenge *out,
                              sbx_error_t *err);
void sbx__auth_challenge_free(struct sbx_auth_challenge *c);

/* A token server's JSON answer: "token" (or "access_token"), "expires_in" seconds (60 when
 * absent, as the distribution spec says). */
int sbx__auth_token_parse(const char *json, size_t len, char **token, long *expires_in,
                          sbx_error_t *err);

/* Credentials for a registry from a Docker-style config (`{"auths": {HOST: {"auth":
 * base64(user:pass)} | {"username", "password"}}}`): path, else $REGISTRY_AUTH_FILE, else
 * $DOCKER_CONFIG/config.json, else ~/.docker/config.json. Returns 1 and fills user/pass when
 * found, 0 when not, -1 on a damaged file. docker.io also matches https://index.docker.io/v1/. */
int sbx__auth_lookup(const char *path, const char *domain, char **user, char **pass,
                     sbx_error_t *err);

#endif
