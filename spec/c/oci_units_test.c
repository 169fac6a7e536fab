/* The OCI spec's network namespace set again for a restore (src/server/sandbox/oci.c,
 * sbx_spec_set_netns): the path replaced, or removed; the rest of the spec kept; a hard link
 * to the old file (a memory image's sandbox.json) keeps the old; a spec without a network
 * namespace, or none at all, is an error naming it. */
#include "check.h"
#include "sandbox/oci.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The network namespace entry of the spec at path (a new reference), or NULL. */
static json_t *netns_of(const char *path)
{
    json_t *root = json_load_file(path, 0, NULL);
    json_t *ns = json_object_get(json_object_get(root, "linux"), "namespaces"), *v, *found = NULL;
    size_t i;
    json_array_foreach(ns, i, v) {
        if (strcmp(json_string_value(json_object_get(v, "type")), "network") == 0)
            found = json_incref(v);
    }
    json_decref(root);
    return found;
}

int main(void)
{
    char dir[] = "/tmp/oci_units_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char config[256], kept[256], err[512];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(kept, sizeof kept, "%s/sandbox.json", dir);
    static const sbx_rootfs binds;
    const char *env[] = {"PATH=/usr/bin", NULL};
    sbx_spec spec = {.rootfs_dir = "/root-of-it", .usr_dir = "/root-of-it/usr", .rootfs = &binds,
                     .workspace_dir = "/ws", .command = "true", .env = env, .uid = 1000, .gid = 1000,
                     .nproc = 64, .tmp_mb = 64, .netns_path = "/proc/1/fd/7"};
    CHECK(sbx_spec_write(dir, &spec, err, sizeof err) == 0);
    CHECK(link(config, kept) == 0);

    CHECK(sbx_spec_set_netns(dir, "/proc/2/fd/9", err, sizeof err) == 0);
    json_t *net = netns_of(config);
    CHECK(net && strcmp(json_string_value(json_object_get(net, "path")), "/proc/2/fd/9") == 0);
    json_decref(net);
    net = netns_of(kept); /* the image's copy keeps what it was saved with */
    CHECK(net && strcmp(json_string_value(json_object_get(net, "path")), "/proc/1/fd/7") == 0);
    json_decref(net);
    json_t *root = json_load_file(config, 0, NULL); /* the rest as written */
    CHECK(root && strcmp(json_string_value(json_object_get(json_object_get(root, "root"), "path")), "/root-of-it") == 0);
    CHECK(json_array_size(json_object_get(json_object_get(root, "linux"), "namespaces")) == 5);
    json_decref(root);
    CHECK(access(config, F_OK) == 0);

    /* none: a new empty namespace, as a sandbox without network gets */
    CHECK(sbx_spec_set_netns(dir, NULL, err, sizeof err) == 0);
    net = netns_of(config);
    CHECK(net && json_object_get(net, "path") == NULL && json_object_size(net) == 1);
    json_decref(net);
    CHECK(sbx_spec_set_netns(dir, NULL, err, sizeof err) == 0); /* (twice: the same) */

    /* a spec without a network namespace entry, or no spec: an error naming the file */
    FILE *f = fopen(config, "w");
    CHECK(f && fputs("{\"linux\": {\"namespaces\": [{\"type\": \"pid\"}]}}", f) >= 0);
    if (f)
        fclose(f);
    err[0] = '\0';
    CHECK(sbx_spec_set_netns(dir, "/proc/2/fd/9", err, sizeof err) == -1);
    CHECK(strstr(err, "has no network namespace") && strstr(err, config));
    CHECK(unlink(config) == 0);
    CHECK(sbx_spec_set_netns(dir, "/proc/2/fd/9", err, sizeof err) == -1);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/config.json.new", dir);
    CHECK(access(tmp, F_OK) != 0); /* nothing left aside */

    CHECK(unlink(kept) == 0);
    CHECK(rmdir(dir) == 0);
    return CHECK_SUMMARY();
}
