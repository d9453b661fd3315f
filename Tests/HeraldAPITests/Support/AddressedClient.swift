import Foundation
import HeraldTestSupport
import NIOCore
import NIOPosix

/// An HTTP/1.1 request made over a fresh connection bound to `source` (a loopback address
/// such as `127.0.0.2`), so the server sees that client address: HummingbirdTesting's clients
/// all connect from 127.0.0.1.
struct AddressedRequest: Sendable {
    var source: String
    var port: Int
    var method = "DELETE"
    var path: String
    var authorization: String

    /// The answer's status and `Retry-After`.
    func send() async throws -> (status: Int, retryAfter: String?) {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let request =
            "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(authorization)\r\n"
            + "Content-Length: 0\r\nConnection: close\r\n\r\n"
        let text = try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: request))
            var response = ByteBuffer()
            for try await var chunk in inbound { response.writeBuffer(&chunk) }
            return String(buffer: response)
        }
        let lines = text.split(separator: "\r\n")
        let statusLine = lines.first?.split(separator: " ") ?? []
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw TestSupportError("no HTTP status line in \(text.prefix(80))")
        }
        let retryAfter = lines.first { $0.lowercased().hasPrefix("retry-after:") }.map {
            String($0.dropFirst("retry-after:".count)).trimmingCharacters(in: .whitespaces)
        }
        return (status, retryAfter)
    }
}
