import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// A parsed XML element: local name (namespace prefix dropped), attributes by local name,
/// child elements, and its own character data (text and CDATA, concatenated).
struct XMLTree: Sendable {
    var name: String
    var attributes: [String: String]
    var children: [XMLTree]
    var text: String

    /// The first child element with this local name.
    func child(_ name: String) -> XMLTree? {
        children.first { $0.name == name }
    }

    /// Every child element with this local name.
    func children(_ name: String) -> [XMLTree] {
        children.filter { $0.name == name }
    }

    /// `true` for `<X i:nil="true"/>`.
    var isNil: Bool {
        attributes["nil"]?.lowercased() == "true"
    }

    /// The text of a child element, or `nil` when it is absent or `i:nil="true"`.
    func string(_ name: String) -> String? {
        guard let node = child(name), !node.isNil else { return nil }
        return node.text
    }

    /// Parses a whole document and returns its root element.
    static func parse(_ bytes: [UInt8]) -> XMLTree? {
        let builder = XMLTreeBuilder()
        let parser = XMLParser(data: Data(bytes))
        parser.shouldProcessNamespaces = false
        parser.shouldReportNamespacePrefixes = false
        parser.shouldResolveExternalEntities = false
        parser.delegate = builder
        guard parser.parse(), builder.failed == false else { return nil }
        return builder.root
    }
}

private func localName(_ qualified: String) -> String {
    guard let colon = qualified.lastIndex(of: ":") else { return qualified }
    return String(qualified[qualified.index(after: colon)...])
}

/// Builds `XMLTree` trees from `XMLParser` callbacks. One instance per parse; not shared.
private final class XMLTreeBuilder: NSObject, XMLParserDelegate {
    var stack: [XMLTree] = []
    var root: XMLTree?
    var failed = false

    func parser(
        _ parser: XMLParser,
        didStartElement elementName: String,
        namespaceURI: String?,
        qualifiedName qName: String?,
        attributes attributeDict: [String: String] = [:]
    ) {
        var attributes: [String: String] = [:]
        for (key, value) in attributeDict {
            attributes[localName(key)] = value
        }
        stack.append(XMLTree(name: localName(elementName), attributes: attributes, children: [], text: ""))
    }

    func parser(
        _ parser: XMLParser,
        didEndElement elementName: String,
        namespaceURI: String?,
        qualifiedName qName: String?
    ) {
        guard let node = stack.popLast() else {
            failed = true
            return
        }
        if stack.isEmpty {
            root = node
        } else {
            stack[stack.count - 1].children.append(node)
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard !stack.isEmpty else { return }
        stack[stack.count - 1].text += string
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        guard !stack.isEmpty else { return }
        stack[stack.count - 1].text += String(decoding: CDATABlock, as: UTF8.self)
    }

    func parser(_ parser: XMLParser, parseErrorOccurred parseError: any Error) {
        failed = true
    }
}

/// Writes XML text with proper escaping.
struct XMLWriter {
    private(set) var output = ""

    /// Escapes `& < > " '` for text and attribute values.
    static func escape(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 0x26 || $0 == 0x3C || $0 == 0x3E || $0 == 0x22 || $0 == 0x27 })
        else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 16)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// Wraps text in CDATA, splitting any `]]>` so the section cannot end early.
    static func cdata(_ text: String) -> String {
        "<![CDATA[" + text.replacingOccurrences(of: "]]>", with: "]]]]><![CDATA[>") + "]]>"
    }

    mutating func raw(_ text: String) {
        output += text
    }

    /// `<name>escaped text</name>`.
    mutating func element(_ name: String, _ text: String) {
        output += "<\(name)>\(Self.escape(text))</\(name)>"
    }

    /// `<name><![CDATA[text]]></name>`.
    mutating func cdataElement(_ name: String, _ text: String) {
        output += "<\(name)>\(Self.cdata(text))</\(name)>"
    }
}
