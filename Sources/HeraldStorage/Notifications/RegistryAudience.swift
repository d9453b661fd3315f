import Foundation
import HeraldDomain

/// Which live devices of Herald's registry a notification's hub sends reach, matched as the hub
/// matches them: a device's tags (`devices.tags`, with `username:` and `tz:` tags, plus the two
/// the hub knows without Herald storing them, `$InstallationId:{…}` for an installation and
/// Herald's marker ``HubMarker``) against each hub send's tag expression, case-sensitive as the
/// emulator compares them; a direct send by its handle; a broadcast, every device.
///
/// A tag expression is turned into a disjunction of ``Conjunct``s (tags a device must all
/// carry, and tags it must carry none of) that one fixed statement evaluates with bound
/// arrays: the hub's limits (6 tags with `&&` or `!`, 20 with `||` only) keep it small.
enum RegistryAudience: Hashable {
    /// Devices matching any of the conjuncts (none: no device).
    case tags([Conjunct])
    /// The live device with this handle on this platform.
    case handle(String, Platform)
    /// What the registry cannot count.
    case uncounted(String)

    /// Tags a device carries all of (`all`) and none of (`none`).
    struct Conjunct: Hashable, Encodable {
        var all: [String]
        var none: [String]

        /// Both sides merged; nil when a tag would have to be both carried and not.
        func merged(with other: Conjunct) -> Conjunct? {
            let all = Set(self.all).union(other.all)
            let none = Set(self.none).union(other.none)
            guard all.isDisjoint(with: none) else { return nil }
            return Conjunct(all: all.sorted(), none: none.sorted())
        }
    }

    /// The most conjuncts an expression may turn into (far more than the hub's limits allow).
    static let maxConjuncts = 256

    /// Why a `$UserId:{…}` tag is not counted.
    static let userIDReason =
        "the audience names a $UserId:{…} tag: installation user ids live at the hub only, not in Herald's registry"

    /// The audience of one notification's hub sends: every send's expression OR-ed (a
    /// notification's sends differ only by format and by chunk of its users).
    static func of(_ sends: [(expression: String?, handle: String?, broadcast: Bool, format: NotificationFormat)]) -> Self {
        var conjuncts: [Conjunct] = []
        var seen = Set<String>()
        for send in sends {
            if send.broadcast { return .tags([Conjunct(all: [], none: [])]) }
            if let handle = send.handle {
                guard let platform = platform(of: send.format) else {
                    return .uncounted("a direct send in the \(send.format.rawValue) format")
                }
                return .handle(handle, platform)
            }
            guard let expression = send.expression else { return .uncounted("a hub send with neither tags nor handle") }
            guard seen.insert(expression).inserted else { continue }
            switch conjunctsOf(expression) {
            case .tags(let more):
                for conjunct in more where !conjuncts.contains(conjunct) { conjuncts.append(conjunct) }
            case let other: return other
            }
            guard conjuncts.count <= maxConjuncts else { return .uncounted("the tag expressions are too complex to count") }
        }
        return .tags(conjuncts)
    }

    /// The platform whose native format `format` is; nil for `template`.
    static func platform(of format: NotificationFormat) -> Platform? {
        Platform.allCases.first { $0.nativeFormat == format }
    }

    /// One checked tag expression as conjuncts.
    static func conjunctsOf(_ expression: String) -> Self {
        var parser = Parser(tokens: tokens(expression))
        guard let node = parser.expression(), parser.index == parser.tokens.count else {
            return .uncounted("the tag expression could not be read")
        }
        if node.tags.contains(where: { $0.hasPrefix("$UserId:") }) { return .uncounted(userIDReason) }
        guard let conjuncts = node.conjuncts(negated: false) else {
            return .uncounted("the tag expression is too complex to count")
        }
        return .tags(conjuncts)
    }

    // MARK: Reading an expression

    /// Expressions here were checked by ``TagExpressionRules``: a tag is a run of anything but
    /// blanks, parentheses and the operators' characters.
    enum Token: Equatable {
        case tag(String)
        case and, or, not, open, close
    }

    static func tokens(_ expression: String) -> [Token] {
        var tokens: [Token] = []
        let scalars = Array(expression.unicodeScalars)
        var index = 0
        let special: Set<Unicode.Scalar> = [" ", "\t", "(", ")", "!", "&", "|"]
        while index < scalars.count {
            switch scalars[index] {
            case " ", "\t": index += 1
            case "(": tokens.append(.open); index += 1
            case ")": tokens.append(.close); index += 1
            case "!": tokens.append(.not); index += 1
            case "&": tokens.append(.and); index += 2
            case "|": tokens.append(.or); index += 2
            default:
                var end = index
                while end < scalars.count, !special.contains(scalars[end]) { end += 1 }
                tokens.append(.tag(String(String.UnicodeScalarView(scalars[index..<end]))))
                index = end
            }
        }
        return tokens
    }

    indirect enum Node {
        case tag(String)
        case not(Node)
        case and(Node, Node)
        case or(Node, Node)

        var tags: [String] {
            switch self {
            case .tag(let tag): [tag]
            case .not(let node): node.tags
            case .and(let lhs, let rhs), .or(let lhs, let rhs): lhs.tags + rhs.tags
            }
        }

        /// The node (negated: its negation) as a disjunction of conjuncts, `!` pushed to the
        /// tags; nil past ``RegistryAudience/maxConjuncts``.
        func conjuncts(negated: Bool) -> [Conjunct]? {
            switch self {
            case .tag(let tag):
                return [negated ? Conjunct(all: [], none: [tag]) : Conjunct(all: [tag], none: [])]
            case .not(let node):
                return node.conjuncts(negated: !negated)
            case .and(let lhs, let rhs), .or(let lhs, let rhs):
                guard let left = lhs.conjuncts(negated: negated), let right = rhs.conjuncts(negated: negated) else {
                    return nil
                }
                var isAnd = false
                if case .and = self { isAnd = true }
                // `a && b` is a product; so is `!(a || b)` = `!a && !b`.
                if isAnd != negated {
                    guard left.count * right.count <= RegistryAudience.maxConjuncts else { return nil }
                    return left.flatMap { l in right.compactMap { l.merged(with: $0) } }
                }
                return left + right
            }
        }
    }

    /// or := and ("||" and)* ; and := unary ("&&" unary)* ; unary := "!" unary | tag | "(" or ")"
    struct Parser {
        let tokens: [Token]
        var index = 0

        mutating func expression() -> Node? {
            guard var node = conjunction() else { return nil }
            while index < tokens.count, tokens[index] == .or {
                index += 1
                guard let rhs = conjunction() else { return nil }
                node = .or(node, rhs)
            }
            return node
        }

        mutating func conjunction() -> Node? {
            guard var node = unary() else { return nil }
            while index < tokens.count, tokens[index] == .and {
                index += 1
                guard let rhs = unary() else { return nil }
                node = .and(node, rhs)
            }
            return node
        }

        mutating func unary() -> Node? {
            guard index < tokens.count else { return nil }
            switch tokens[index] {
            case .not:
                index += 1
                return unary().map(Node.not)
            case .tag(let tag):
                index += 1
                return .tag(tag)
            case .open:
                index += 1
                guard let node = expression(), index < tokens.count, tokens[index] == .close else { return nil }
                index += 1
                return node
            default:
                return nil
            }
        }
    }
}
