/* A plain C host for the net plugin, as NCCL is one: compiled as C, linked with no C++ runtime of its
 * own, it dlopens the plugin, calls the newest table's init with a logger that keeps the WARN lines, and
 * checks that a broken preset named by MEGASCALE_CC fails init with an NCCL error code and a WARN that
 * names the file and the line, instead of an exception escaping the C ABI (which aborts the host).
 *
 *   plugin_c_host PLUGIN.so CASE DIR    (CASE: syntax, tab, deep, binary, huge)
 *
 * Exit 0: init failed as it should. Anything else (a crash, an abort, init succeeding, no WARN, a WARN
 * without the file and line) fails the ctest entry of the case. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first two fields of ncclNet_v11_t; init's config and profiler are passed as NULL. */
typedef void (*nccl_logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                              ...);
typedef struct {
  const char* name;
  int (*init)(void** ctx, uint64_t comm_id, void* config, nccl_logger_t logger, void* profiler);
} net_v11_head;

enum { kLogWarn = 2, kMaxWarns = 16, kWarnChars = 4096 };
static char g_warns[kMaxWarns][kWarnChars];
static int g_nwarns;

static void logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level != kLogWarn || g_nwarns == kMaxWarns) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_warns[g_nwarns++], kWarnChars, fmt, ap);
  va_end(ap);
}

/* Writes the broken preset of `name` to `path`; returns the line the WARN must name, 0 on error. */
static int write_case(const char* name, const char* path) {
  FILE* f = fopen(path, "wb");
  if (f == NULL) return 0;
  int line = 0;
  if (strcmp(name, "syntax") == 0) {
    /* The reproducer: an unclosed flow sequence, reported where the file ends. */
    fputs("controller: [hybrid\n", f);
    line = 2;
  } else if (strcmp(name, "tab") == 0) {
    fputs("controller: hybrid\nflow:\n\tline_rate_gbps: 100\n", f);
    line = 3;
  } else if (strcmp(name, "deep") == 0) {
    /* 100k unclosed '[': past yaml-cpp's depth limit, named at the line they are on. */
    fputs("controller: hybrid\nflow: ", f);
    for (int i = 0; i < 100000; ++i) fputc('[', f);
    fputc('\n', f);
    line = 2;
  } else if (strcmp(name, "binary") == 0) {
    fputs("controller: hybrid\n", f);
    static const unsigned char junk[] = {0x00, 0xff, 0xfe, 0x01, 0x1b, ':', 0x80, '\n', 0x7f, 0xc3, 0x28};
    fwrite(junk, 1, sizeof junk, f);
    fputc('\n', f);
    line = 2;
  } else if (strcmp(name, "huge") == 0) {
    /* About 34 MB of comment lines, then an unclosed mapping; yaml-cpp names the line after it. */
    fputs("controller: hybrid\n", f);
    const int comments = 1000000;
    for (int i = 0; i < comments; ++i) fputs("# padding padding padding padding\n", f);
    fputs("flow: {line_rate_gbps: 100\n", f);
    line = comments + 3;
  }
  if (fclose(f) != 0) return 0;
  return line;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PLUGIN.so CASE DIR\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/broken-%s.yaml", argv[3], argv[2]);
  const int line = write_case(argv[2], path);
  if (line == 0) {
    fprintf(stderr, "cannot write case '%s' to %s\n", argv[2], path);
    return 2;
  }
  setenv("MEGASCALE_CC", path, 1);

  void* so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  const net_v11_head* net = (const net_v11_head*)dlsym(so, "ncclNetPlugin_v11");
  if (net == NULL || net->init == NULL) {
    fprintf(stderr, "no ncclNetPlugin_v11 table with an init\n");
    return 2;
  }
  void* ctx = NULL;
  const int rc = net->init(&ctx, 1, NULL, logger, NULL);
  remove(path);
  fprintf(stderr, "case %s: init returned %d, %d WARN line(s)\n", argv[2], rc, g_nwarns);
  for (int i = 0; i < g_nwarns; ++i) fprintf(stderr, "  WARN %.600s\n", g_warns[i]);
  if (rc == 0) {
    fprintf(stderr, "FAIL: init accepted the broken preset %s\n", path);
    return 1;
  }
  char want[4200];
  snprintf(want, sizeof want, "%s:%d:", path, line);
  for (int i = 0; i < g_nwarns; ++i) {
    if (strstr(g_warns[i], want) != NULL) {
      fprintf(stderr, "PASS: a WARN names %s\n", want);
      return 0;
    }
  }
  fprintf(stderr, "FAIL: no WARN names '%s'\n", want);
  return 1;
}
