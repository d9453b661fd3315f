#!/usr/bin/env python3
"""A TCP fault proxy: forwards one local port to an upstream and, on command, holds, slows, resets
or half-opens the connections through it, as a network partition would.

    faultproxy.py --upstream HOST:PORT [--port N] [--seed N] [--log FILE]

Prints `listening PORT` once it accepts connections, then reads one command per line on standard
input and answers each with one line (`ok ...` or `error REASON`). It exits when standard input
closes, or on SIGTERM/SIGINT. Commands apply to the open connections and to new ones:

    pass        forward both ways; bytes held by `blackhole` are delivered first, and no
                connection stays chosen for a reset
    blackhole   forward nothing either way; hold the bytes until `pass`
    slow MS     forward each chunk MS milliseconds after it arrived
    reset P     choose each open or new connection with probability P (again on every `reset`);
                a chosen one is reset (RST to both sides) on its next chunk
    halfopen    close the upstream side of every open connection silently, keep the client side
                open and never answer it; new connections are held as in `blackhole`
    stats       `ok connections=N open=N resets=N held_bytes=N`

Only loopback is listened on. The log (`--log`) names connections and mode changes, never the
bytes carried: they may hold credentials.
"""
import argparse
import asyncio
import random
import signal
import socket
import struct
import sys
import time

CHUNK = 65536
TO_UPSTREAM, TO_CLIENT = 0, 1


class Link:
    """One client connection and its upstream connection."""

    def __init__(self, number, client, upstream):
        self.number = number
        # writer per direction: where bytes read from the other side go.
        self.writers = {TO_UPSTREAM: upstream[1], TO_CLIENT: client[1]}
        self.readers = {TO_UPSTREAM: client[0], TO_CLIENT: upstream[0]}
        self.held = {TO_UPSTREAM: [], TO_CLIENT: []}  # bytes, or None for a held end of stream
        self.doomed = False
        self.upstream_cut = False
        self.closed = False

    def held_bytes(self):
        return sum(len(b) for chunks in self.held.values() for b in chunks if b is not None)


class Proxy:
    def __init__(self, upstream_host, upstream_port, rng, log):
        self.upstream = (upstream_host, upstream_port)
        self.rng = rng
        self.log_file = log
        self.mode = "pass"
        self.delay = 0.0
        self.reset_probability = 0.0
        self.links = set()
        self.connections = 0
        self.resets = 0

    def log(self, text):
        if self.log_file:
            self.log_file.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            self.log_file.flush()

    # ------------------------------------------------------------ connections

    async def accept(self, client_reader, client_writer):
        self.connections += 1
        number = self.connections
        try:
            upstream = await asyncio.open_connection(*self.upstream)
        except OSError as error:
            self.log(f"#{number} upstream refused: {error.strerror or error}")
            abort(client_writer)
            return
        link = Link(number, (client_reader, client_writer), upstream)
        self.links.add(link)
        if self.mode == "reset":
            link.doomed = self.rng.random() < self.reset_probability
        self.log(f"#{number} open{' (chosen for reset)' if link.doomed else ''}")
        try:
            await asyncio.gather(self.pump(link, TO_UPSTREAM), self.pump(link, TO_CLIENT))
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        self.close(link)
        self.links.discard(link)
        self.log(f"#{number} closed")

    async def pump(self, link, direction):
        reader = link.readers[direction]
        while not link.closed:
            try:
                data = await reader.read(CHUNK)
            except (ConnectionError, OSError):
                data = b""
            if link.closed:
                return
            if link.doomed:
                self.reset(link)
                return
            if not data:
                # The end of the stream travels like any chunk: held while the path is held.
                await self.deliver(link, direction, None)
                return
            await self.deliver(link, direction, data)

    async def deliver(self, link, direction, data):
        if link.upstream_cut:
            return  # a half-open connection: what the client sends goes nowhere
        if self.mode in ("blackhole", "halfopen"):
            link.held[direction].append(data)
            return
        if self.delay:
            await asyncio.sleep(self.delay)
            if link.closed or link.upstream_cut:
                return
            if self.mode in ("blackhole", "halfopen"):
                link.held[direction].append(data)
                return
        self.flush(link, direction)
        self.write(link, direction, data)
        if data is not None and not link.closed:
            try:
                await link.writers[direction].drain()
            except (ConnectionError, OSError):
                self.close(link)

    def flush(self, link, direction):
        """Writes what the direction held, in order."""
        held, link.held[direction] = link.held[direction], []
        for chunk in held:
            self.write(link, direction, chunk)

    def write(self, link, direction, data):
        if link.closed:
            return
        if data is None:
            self.close(link)
            return
        try:
            link.writers[direction].write(data)
        except (ConnectionError, OSError):
            self.close(link)

    def close(self, link):
        if link.closed:
            return
        link.closed = True
        for writer in link.writers.values():
            try:
                writer.close()
            except (ConnectionError, OSError):
                pass
        for reader in link.readers.values():
            reader.feed_eof()

    def reset(self, link):
        if link.closed:
            return
        link.closed = True
        self.resets += 1
        self.log(f"#{link.number} reset")
        for writer in link.writers.values():
            abort(writer)
        for reader in link.readers.values():
            reader.feed_eof()

    # ------------------------------------------------------------ commands

    def command(self, line):
        words = line.split()
        if not words:
            return "error empty command"
        name, args = words[0], words[1:]
        if name == "pass" and not args:
            self.set_mode("pass")
            for link in list(self.links):
                link.doomed = False
                if not link.upstream_cut:
                    for direction in (TO_UPSTREAM, TO_CLIENT):
                        self.flush(link, direction)
            return "ok pass"
        if name == "blackhole" and not args:
            self.set_mode("blackhole")
            return "ok blackhole"
        if name == "slow" and len(args) == 1 and args[0].isdigit():
            self.set_mode("slow", delay=int(args[0]) / 1000)
            return f"ok slow {args[0]}"
        if name == "reset" and len(args) == 1:
            try:
                probability = float(args[0])
            except ValueError:
                return "error reset takes a probability between 0 and 1"
            if not 0 <= probability <= 1:
                return "error reset takes a probability between 0 and 1"
            self.set_mode("reset", probability=probability)
            chosen = 0
            for link in self.links:
                if not link.doomed and self.rng.random() < probability:
                    link.doomed = True
                    chosen += 1
            return f"ok reset {probability} chosen={chosen}"
        if name == "halfopen" and not args:
            self.set_mode("halfopen")
            cut = 0
            for link in list(self.links):
                if not link.upstream_cut and not link.closed:
                    link.upstream_cut = True
                    link.held = {TO_UPSTREAM: [], TO_CLIENT: []}
                    link.writers[TO_UPSTREAM].close()
                    link.readers[TO_CLIENT].feed_eof()
                    cut += 1
            return f"ok halfopen cut={cut}"
        if name == "stats" and not args:
            held = sum(link.held_bytes() for link in self.links)
            return f"ok connections={self.connections} open={len(self.links)} resets={self.resets} held_bytes={held}"
        return f"error unknown command: {line.strip()[:80]}"

    def set_mode(self, mode, delay=0.0, probability=0.0):
        self.mode = mode
        self.delay = delay
        self.reset_probability = probability
        self.log(f"mode {mode}" + (f" {int(delay * 1000)} ms" if delay else "") + (f" p={probability}" if probability else ""))


def abort(writer):
    """Closes a connection with a reset (RST) rather than an orderly end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--port", type=int, default=0, help="loopback port to listen on (0: any free port)")
    parser.add_argument("--seed", type=int, help="seed of the reset choices")
    parser.add_argument("--log", help="file to log connections and mode changes to")
    options = parser.parse_args()
    host, _, port = options.upstream.rpartition(":")
    if not host or not port.isdigit():
        parser.error("--upstream must be HOST:PORT")
    log = open(options.log, "a", buffering=1) if options.log else None
    proxy = Proxy(host.strip("[]"), int(port), random.Random(options.seed), log)

    server = await asyncio.start_server(proxy.accept, "127.0.0.1", options.port)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    proxy.log(f"listening {server.sockets[0].getsockname()[1]} -> {options.upstream}")

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)

    async def read_commands():
        while True:
            line = await commands.readline()
            if not line:
                break
            print(proxy.command(line.decode(errors="replace")), flush=True)
        stop.set()

    reader = asyncio.ensure_future(read_commands())
    await stop.wait()
    reader.cancel()
    server.close()
    for link in list(proxy.links):
        proxy.close(link)
    proxy.log("stopped")


if __name__ == "__main__":
    asyncio.run(main())
