import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// A parsed XML element with namespace prefixes stripped from element and attribute names
/// (the service's documents use the default namespace, `i:nil` and `a:etag`; clients may pick
/// other prefixes).
final class XMLNode: @unchecked Sendable {
    let name: String
    let attributes: [String: String]
    fileprivate(set) var children: [XMLNode] = []
    fileprivate(set) var text = ""

    init(name: String, attributes: [String: String]) {
        self.name = name
        self.attributes = attributes
    }

    /// `i:nil="true"` (any prefix).
    var isNil: Bool {
        attributes["nil"].map { $0.caseInsensitiveEquals("true") } ?? false
    }

    func child(_ localName: String) -> XMLNode? {
        children.first { $0.name == localName }
    }

    /// Case-insensitive lookup, for lenient readers.
    func childIgnoringCase(_ localName: String) -> XMLNode? {
        children.first { $0.name.caseInsensitiveEquals(localName) }
    }

    /// The text content, or nil when the element is absent or `i:nil="true"`.
    func value(of localName: String) -> String? {
        guard let node = child(localName), !node.isNil else { return nil }
        return node.text
    }
}

enum XMLTreeError: Error, CustomStringConvertible {
    case malformed(String)

    var description: String {
        switch self {
        case .malformed(let reason): return reason
        }
    }
}

enum XMLTree {
    static func localName(_ qualified: String) -> String {
        if let colon = qualified.lastIndex(of: ":") {
            return String(qualified[qualified.index(after: colon)...])
        }
        return qualified
    }

    /// Parses a whole document; throws on malformed XML.
    static func parse(_ data: Data) throws -> XMLNode {
        let builder = TreeBuilder()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = false
        parser.shouldReportNamespacePrefixes = false
        parser.shouldResolveExternalEntities = false
        parser.delegate = builder
        guard parser.parse(), builder.wellFormed, builder.stack.isEmpty, let root = builder.root else {
            let reason = parser.parserError.map { "\($0)" } ?? "empty document"
            throw XMLTreeError.malformed(reason)
        }
        return root
    }

    /// Whether `text` is well-formed XML.
    static func isWellFormed(_ text: String) -> Bool {
        (try? parse(Data(text.utf8))) != nil
    }
}

private final class TreeBuilder: NSObject, XMLParserDelegate {
    var stack: [XMLNode] = []
    var root: XMLNode?
    /// FoundationXML on Linux recovers from some errors (mismatched end tags, a second root),
    /// so those are checked here.
    var wellFormed = true

    func parser(
        _ parser: XMLParser,
        didStartElement elementName: String,
        namespaceURI: String?,
        qualifiedName qName: String?,
        attributes attributeDict: [String: String] = [:]
    ) {
        var attributes: [String: String] = [:]
        for (key, value) in attributeDict where !key.hasPrefix("xmlns") {
            attributes[XMLTree.localName(key)] = value
        }
        let node = XMLNode(name: XMLTree.localName(elementName), attributes: attributes)
        if let parent = stack.last {
            parent.children.append(node)
        } else if root == nil {
            root = node
        } else {
            wellFormed = false
        }
        stack.append(node)
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
        guard let open = stack.popLast(), open.name == XMLTree.localName(elementName) else {
            wellFormed = false
            parser.abortParsing()
            return
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        stack.last?.text += string
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        stack.last?.text += String(decoding: CDATABlock, as: UTF8.self)
    }
}

/// Text helpers for writing XML.
enum XMLText {
    static func escape(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 38 || $0 == 60 || $0 == 62 || $0 == 34 || $0 == 39 }) else {
            return text
        }
        var out = ""
        out.reserveCapacity(text.utf8.count + 16)
        for c in text.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// `<![CDATA[…]]>`, splitting any `]]>` inside.
    static func cdata(_ text: String) -> String {
        "<![CDATA[" + text.replacingOccurrences(of: "]]>", with: "]]]]><![CDATA[>") + "]]>"
    }

    /// Resolves the predefined entities and character references.
    static func unescape<S: StringProtocol>(_ text: S) -> String {
        guard text.contains("&") else { return String(text) }
        var out = ""
        var rest = Substring(text)
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            let after = rest[amp...]
            guard let semi = after.firstIndex(of: ";"), after.distance(from: amp, to: semi) <= 10 else {
                out += "&"
                rest = rest[rest.index(after: amp)...]
                continue
            }
            let entity = after[after.index(after: amp)..<semi]
            var replacement: String?
            switch entity {
            case "lt": replacement = "<"
            case "gt": replacement = ">"
            case "amp": replacement = "&"
            case "quot": replacement = "\""
            case "apos": replacement = "'"
            default:
                if entity.hasPrefix("#x") || entity.hasPrefix("#X"), let v = UInt32(entity.dropFirst(2), radix: 16),
                    let s = Unicode.Scalar(v)
                {
                    replacement = String(Character(s))
                } else if entity.hasPrefix("#"), let v = UInt32(entity.dropFirst()), let s = Unicode.Scalar(v) {
                    replacement = String(Character(s))
                }
            }
            if let replacement {
                out += replacement
                rest = rest[rest.index(after: semi)...]
            } else {
                out += "&"
                rest = rest[rest.index(after: amp)...]
            }
        }
        out += rest
        return out
    }
}
