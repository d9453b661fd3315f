public import Foundation
public import HeraldDomain

/// A device user as operators see it (never with the password hash).
public struct UserRecord: Sendable, Hashable {
    /// Database id.
    public var id: Int64
    /// Sign-in name; the `username:<name>` tag.
    public var name: String
    /// A disabled user cannot sign in.
    public var disabled: Bool
    /// False for users known only from a JWT issuer.
    public var hasPassword: Bool
    /// When the user was added.
    public var createdAt: Date
}

/// What sign-in needs to know about a user.
public struct UserCredential: Sendable, Hashable {
    /// Database id.
    public var id: Int64
    /// Sign-in name.
    public var name: String
    /// The bcrypt hash; nil for users known only from a JWT issuer (they cannot use Basic).
    public var passwordHash: String?
    /// A disabled user cannot sign in.
    public var disabled: Bool
    /// Changes whenever the password or the disabled flag changes: cached sign-ins are valid
    /// only while it matches.
    public var credentialVersion: Int64
}

/// A sender API key as operators see it (never the key or its hash).
public struct APIKeyRecord: Sendable, Hashable {
    /// Database id.
    public var id: Int64
    /// A unique name, e.g. the sending service's.
    public var name: String
    /// `hrld_` and the first characters of the key.
    public var displayPrefix: String
    /// What the key may do.
    public var scopes: [APIKeyScope]
    /// Requests per second allowed per API process; nil: the server's default.
    public var rateLimitPerSecond: Int?
    /// When the key was made.
    public var createdAt: Date
    /// When the key was last used (updated at most once a minute).
    public var lastUsedAt: Date?
    /// When the key was revoked; a revoked key is refused.
    public var revokedAt: Date?
}
