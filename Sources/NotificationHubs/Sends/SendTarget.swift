/// Who a send reaches.
///
/// ```swift
/// .tag("username:alice")
/// .tags(["username:alice", "username:bob"])   // OR: alice || bob (at most 20)
/// .tagExpression("(sports || news) && lang:en")
/// .installation("c4d0…")               // $InstallationId:{c4d0…}
/// .user("42")                          // $UserId:{42}
/// .device(handle: "62BC…")             // direct send, no registration needed
/// ```
///
/// Expressions are checked (characters, length, operators, tag counts) when sent. A send to every
/// device is ``NotificationHubClient/broadcast(_:logger:)``, never a target: `send`, `sendTest`
/// and `schedule` refuse ``allDevices``.
public struct SendTarget: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        case all
        case expression(String)
        case tags([String])
        case device(String)
    }

    let kind: Kind

    /// Every registration of the send's platform (native sends) or every template registration
    /// (template sends): what a send without tags or device handle would reach. Refused by
    /// `send`, `sendTest` and `schedule` with `invalid_argument`, so a target that lost its tags
    /// cannot become a broadcast; ``NotificationHubClient/broadcast(_:logger:)`` is the way to
    /// send to every device.
    public static let allDevices = SendTarget(kind: .all)

    /// Registrations with this tag.
    public static func tag(_ tag: String) -> SendTarget {
        SendTarget(kind: .expression(tag))
    }

    /// Registrations with any of these tags: joined with `||` (at most 20 tags; split larger
    /// lists with ``TagExpression/orExpressions(for:maxTagsPerExpression:)``).
    public static func tags(_ tags: [String]) -> SendTarget {
        SendTarget(kind: .tags(tags))
    }

    /// Registrations matching a tag expression (`&&`, `||`, `!`, parentheses).
    public static func tagExpression(_ expression: String) -> SendTarget {
        SendTarget(kind: .expression(expression))
    }

    /// The registrations of one installation (`$InstallationId:{id}`).
    public static func installation(_ installationID: String) -> SendTarget {
        SendTarget(kind: .expression("$InstallationId:{\(installationID)}"))
    }

    /// Every installation with this `userId` (`$UserId:{id}`).
    public static func user(_ userID: String) -> SendTarget {
        SendTarget(kind: .expression("$UserId:{\(userID)}"))
    }

    /// One device by its platform handle (APNs token, FCM registration token, WNS channel
    /// URI): a direct send (`?direct`), with no registration involved.
    public static func device(handle: String) -> SendTarget {
        SendTarget(kind: .device(handle))
    }

    /// The `ServiceBusNotification-Tags` value, checked; `nil` for a broadcast or direct send.
    func tagHeader(operation: NotificationHubsError.Operation) throws(NotificationHubsError) -> String? {
        switch kind {
        case .all, .device:
            return nil
        case .expression(let expression):
            do {
                try TagExpression.validate(expression)
            } catch {
                throw NotificationHubsError(
                    code: error.code, operation: operation, reason: error.reason, detail: error.detail)
            }
            return expression
        case .tags(let tags):
            do {
                return try TagExpression.or(tags)
            } catch {
                throw NotificationHubsError(
                    code: error.code, operation: operation, reason: error.reason, detail: error.detail)
            }
        }
    }
}
