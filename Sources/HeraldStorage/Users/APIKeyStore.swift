import Crypto
import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO


/// Sender API keys: made and revoked by `heraldctl keys`, checked by the API.
public struct APIKeyStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    /// The longest one operation waits for the database (``StorageConfiguration/databaseWait``).
    let wait: Duration

    /// Creates a store on `client` whose operations wait at most `wait` for the database
    /// (``Stores`` passes ``StorageConfiguration/databaseWait``; the default here is for tools
    /// and tests on a shared, loaded database).
    public init(
        client: PostgresClient, logger: Logger,
        wait: Duration = .seconds(60)
    ) {
        self.client = client
        self.logger = logger
        self.wait = wait
    }

    /// Makes a key and returns it with its record. The key is not stored and cannot be shown again.
    public func create(
        name: String, scopes: [APIKeyScope], rateLimitPerSecond: Int? = nil
    ) async throws -> (
        key: String, record: APIKeyRecord
    ) {
        let name = try UserName.validated(name)
        guard !scopes.isEmpty else { throw DomainError(code: .invalidScope, message: "give at least one scope") }
        if let rate = rateLimitPerSecond, rate <= 0 {
            throw DomainError(code: .invalidRateLimit, message: "a rate limit is a positive number of requests per second")
        }
        let key = APIKeyFormat.generate()
        let record = try await StorageSQL.run("create an API key", within: wait) { () -> APIKeyRecord? in
            let rows = try await client.query(
                try APIKeyStatements.create(
                    name: name, hash: Self.hash(key), displayPrefix: APIKeyFormat.display(key),
                    scopes: scopes.map(\.rawValue), rateLimit: rateLimitPerSecond.map(Int32.init(clamping:))),
                logger: logger)
            return try await APIKeyStatements.records(rows).first
        }
        guard let record else {
            throw DomainError(code: .keyExists, message: "an API key named \(name) already exists", kind: .conflict)
        }
        return (key, record)
    }

    /// Every key, revoked ones included, by name.
    public func list() async throws -> [APIKeyRecord] {
        try await StorageSQL.run("list API keys", within: wait) {
            try await APIKeyStatements.records(try await client.query(APIKeyStatements.list(), logger: logger))
        }
    }

    /// Revokes the key called `name`; false when there is no live key by that name.
    @discardableResult
    public func revoke(name: String) async throws -> Bool {
        try await StorageSQL.run("revoke an API key", within: wait) {
            let rows = try await client.query(APIKeyStatements.revoke(name: name), logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The live key that `key` is, if any. Malformed keys (bad prefix, length or checksum) are
    /// refused without a query. The lookup is by the key's SHA-256, so timing reveals nothing
    /// about stored keys.
    public func authenticate(_ key: String) async throws -> APIKeyRecord? {
        guard APIKeyFormat.isWellFormed(key) else { return nil }
        return try await StorageSQL.run("check an API key", within: wait) {
            let rows = try await client.query(try APIKeyStatements.authenticate(hash: Self.hash(key)), logger: logger)
            return try await APIKeyStatements.records(rows).first
        }
    }

    static func hash(_ key: String) -> Data { Data(SHA256.hash(data: Data(key.utf8))) }
}
