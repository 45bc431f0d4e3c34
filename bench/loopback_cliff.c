/* The loopback cliff at 128 KiB responses (bench/README.md, issue 34's fifth stop), without
 * slipstream: a thread per connection answers every request on it with a fixed head, sent with
 * send(MSG_MORE) (or without), then the file with sendfile(2), as slipstream's file and cache
 * paths do. Build and run:
 *   gcc -O2 -o /tmp/cliff bench/loopback_cliff.c -lpthread
 *   taskset -c 1 /tmp/cliff PORT FILE MORE(0|1) [HEAD_PADDING_BYTES] &
 *   taskset -c 0 wrk -t1 -c50 -d3s http://127.0.0.1:PORT/
 * with FILE of 127, 128 and 129 KiB (head -c $((128*1024)) /dev/zero > /tmp/128k). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *path;
static int more, padding;

static void *serve(void *arg) {
    int fd = (int)(long)arg, file = open(path, O_RDONLY);
    struct stat st;
    char request[4096], head[9000], pad[8192];
    memset(pad, 'x', sizeof pad);
    if (file < 0 || fstat(file, &st) != 0) return NULL;
    int len = snprintf(head, sizeof head,
                       "HTTP/1.1 200 OK\r\nServer: cliff\r\nContent-Type: text/plain\r\n"
                       "X-Pad: %.*s\r\nContent-Length: %ld\r\n\r\n",
                       padding, pad, (long)st.st_size);
    while (recv(fd, request, sizeof request, 0) > 0) {
        if (send(fd, head, len, more ? MSG_MORE : 0) != len) break;
        off_t at = 0;
        while (at < st.st_size)
            if (sendfile(fd, file, &at, st.st_size - at) <= 0) goto done;
    }
done:
    close(file);
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PORT FILE MORE(0|1) [HEAD_PADDING_BYTES]\n", argv[0]);
        return 2;
    }
    path = argv[2];
    more = atoi(argv[3]);
    padding = argc > 4 ? atoi(argv[4]) : 0;
    if (padding < 0 || padding > 8192) padding = 0;
    signal(SIGPIPE, SIG_IGN); /* a client that leaves mid-response ends its thread, not the server */
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 1024) != 0) {
        perror("listen");
        return 1;
    }
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t thread;
        if (pthread_create(&thread, NULL, serve, (void *)(long)fd) == 0) pthread_detach(thread);
        else close(fd);
    }
}
