import NotificationHubsEmulator
import Testing

/// Template expansion on its own (reference §5).
@Suite("Templates")
struct TemplateTests {
    static let parameters = TemplateParameters([
        "name": "Alice",
        "Title": "This is the title line",
        "query": "a b&c/d",
        "count": "40",
        "price": "3.25e+2",
        "negative": "-5",
        "word": "forty",
        "quote": "say \"hi\"",
        "markup": "<b>&</b>",
    ])

    struct Case: CustomTestStringConvertible, Sendable {
        var expression: String
        var value: String
        var testDescription: String { "\(expression) → \(value)" }
    }

    static let expressions: [Case] = [
        Case(expression: "$(name)", value: "Alice"),
        Case(expression: "$(NAME)", value: "Alice"),  // property names are case-insensitive
        Case(expression: "$(title)", value: "This is the title line"),
        Case(expression: "$(missing)", value: ""),
        Case(expression: "$(name, 3)", value: "Ali"),
        Case(expression: "$(name,10)", value: "Alice"),
        Case(expression: "$(name, 0)", value: ""),
        Case(expression: ".(title, 20)", value: "This is the title..."),
        Case(expression: ".(name, 20)", value: "Alice"),
        Case(expression: "%(query)", value: "a%20b%26c%2Fd"),
        Case(expression: "#(count)", value: "40"),
        Case(expression: "{'Hello ' + $(name)}", value: "Hello Alice"),
        Case(expression: "{$(name) + ' ' + .(title, 10)}", value: "Alice This is..."),
        Case(expression: "{\"double \"\" quote\" + 'single '' quote'}", value: "double \" quotesingle ' quote"),
        Case(expression: "{ %(query) + '!' }", value: "a%20b%26c%2Fd!"),
        Case(expression: "$(name) + '!'", value: "Alice!"),  // the .NET parser accepts + without braces
        Case(expression: "$(missing:{fallback})", value: "fallback"),
        Case(expression: "$(name:{fallback})", value: "Alice"),
        Case(expression: "$(missing:{a\\}b})", value: "a}b"),
    ]

    @Test(arguments: expressions)
    func evaluates(_ c: Case) throws {
        let expression = try TemplateExpression(c.expression)
        #expect(expression.evaluate(Self.parameters) == c.value)
    }

    static let invalid = [
        "$name",  // no parentheses
        "$(name",  // no closing )
        ".(title)",  // . needs a length
        "%(query, 3)",  // % takes no length
        "#(count, 2)",  // # takes no length
        "{#(count) + 'x'}",  // # cannot be combined
        "{$(name)",  // no closing }
        "$(bad-name)",  // property characters
        "$()",
        "$(name, x)",
        "$(name) rocks",  // trailing text
        "{'unterminated}",
        "$body",
    ]

    @Test(arguments: invalid)
    func rejects(_ text: String) {
        #expect(throws: TemplateError.self) { try TemplateExpression(text) }
    }

    @Test func recognition() {
        for literal in ["Hello $(name)", " $(name)", "plain", ""] {
            #expect(!TemplateExpression.isExpression(literal))
        }
        for expression in ["$(x)", ".(x, 1)", "%(x)", "#(x)", "{'a'}"] {
            #expect(TemplateExpression.isExpression(expression))
        }
    }

    @Test func numericLiterals() {
        for number in ["0", "40", "3.25", "1e5", "2.5E-3", "10e+2"] { #expect(TemplateExpression.isNumericLiteral(number)) }
        for text in ["-5", "01", "1.", ".5", "forty", "", "1e", "0x10"] { #expect(!TemplateExpression.isNumericLiteral(text)) }
    }

    struct BodyCase: CustomTestStringConvertible, Sendable {
        var template: String
        var xml: Bool
        var rendered: String
        var testDescription: String { template }
    }

    static let bodies: [BodyCase] = [
        BodyCase(template: #"{"aps":{"alert":"$(name)"}}"#, xml: false, rendered: #"{"aps":{"alert":"Alice"}}"#),
        // Keys are never expressions; a value that does not start with an expression character is a literal.
        BodyCase(template: #"{"$(name)":"Hello $(name)"}"#, xml: false, rendered: #"{"$(name)":"Hello $(name)"}"#),
        // #() becomes a bare number only when the value is a number.
        BodyCase(template: ##"{"badge":"#(count)","p":"#(price)","n":"#(negative)","w":"#(word)"}"##, xml: false,
                 rendered: #"{"badge":40,"p":3.25e+2,"n":"-5","w":"forty"}"#),
        // Values are JSON-escaped; whitespace and layout are kept.
        BodyCase(template: "{ \"a\" : [ \"$(quote)\", 1, true ],\n \"b\": { \"c\": \"{'<' + $(name) + '>'}\" } }", xml: false,
                 rendered: "{ \"a\" : [ \"say \\\"hi\\\"\", 1, true ],\n \"b\": { \"c\": \"<Alice>\" } }"),
        BodyCase(template: #"{"message":{"android":{"data":{"message":"$(missing)","t":".(title, 7)"}}}}"#, xml: false,
                 rendered: #"{"message":{"android":{"data":{"message":"","t":"This..."}}}}"#),
        // XML: text nodes and attribute values; values are XML-escaped.
        BodyCase(template: #"<toast><visual><binding template="ToastText01"><text id="1">$(markup)</text></binding></visual></toast>"#, xml: true,
                 rendered: #"<toast><visual><binding template="ToastText01"><text id="1">&lt;b&gt;&amp;&lt;/b&gt;</text></binding></visual></toast>"#),
        BodyCase(template: #"<toast launch="$(name)"><text>{'Hi ' + $(name)}</text><text>Hello $(name)</text></toast>"#, xml: true,
                 rendered: #"<toast launch="Alice"><text>Hi Alice</text><text>Hello $(name)</text></toast>"#),
        BodyCase(template: ##"<badge value="#(count)"/>"##, xml: true, rendered: #"<badge value="40"/>"#),
        // Entities inside an expression are decoded before evaluation.
        BodyCase(template: "<t>{&apos;x&apos; + $(name)}</t>", xml: true, rendered: "<t>xAlice</t>"),
    ]

    @Test(arguments: bodies)
    func renders(_ c: BodyCase) throws {
        let template = try NotificationTemplate(c.template, syntax: c.xml ? .xml : .json)
        #expect(template.render(Self.parameters) == c.rendered)
    }

    @Test func rejectsBadBodies() {
        #expect(throws: TemplateError.self) { try NotificationTemplate(#"{"a":"$(x)""#, syntax: .json) }
        #expect(throws: TemplateError.self) { try NotificationTemplate(#"{"a":".(x)"}"#, syntax: .json) }
        #expect(throws: TemplateError.self) { try NotificationTemplate("<toast><text>$(x)</toast>", syntax: .xml) }
        #expect(throws: TemplateError.self) { try NotificationTemplate("<toast a=\"$(x\"/>", syntax: .xml) }
    }
}
