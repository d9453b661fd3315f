@testable import HeraldDomain
import Testing

@Suite("API key format")
struct APIKeyFormatTests {
    @Test("generated keys are well-formed, distinct, and carry the prefix")
    func generated() {
        let keys = (0..<200).map { _ in APIKeyFormat.generate() }
        #expect(Set(keys).count == keys.count)
        for key in keys {
            #expect(key.hasPrefix("hrld_") && key.count == APIKeyFormat.length)
            #expect(APIKeyFormat.isWellFormed(key))
        }
    }

    @Test("one changed character, a wrong prefix or length fails the checksum check")
    func typosAreCaught() {
        let key = APIKeyFormat.generate()
        var caught = 0
        let characters = Array(key)
        for index in APIKeyFormat.prefix.count..<characters.count {
            var typo = characters
            typo[index] = typo[index] == "a" ? "b" : "a"
            if !APIKeyFormat.isWellFormed(String(typo)) { caught += 1 }
        }
        #expect(caught == characters.count - APIKeyFormat.prefix.count, "every single-character typo is refused")
        #expect(!APIKeyFormat.isWellFormed("hrlx_" + key.dropFirst(5)))
        #expect(!APIKeyFormat.isWellFormed(key + "a"))
        #expect(!APIKeyFormat.isWellFormed(key.dropLast()))
        #expect(!APIKeyFormat.isWellFormed(String(key.dropLast()) + "é"))
    }

    @Test("the checksum is base62 of CRC-32/IEEE: the standard check value for \"123456789\"")
    func checksumVector() {
        // CRC-32("123456789") = 0xCBF43926; in base62, six digits: 3jZRME (computed with zlib).
        #expect(APIKeyFormat.checksum("123456789") == "3jZRME")
        #expect(APIKeyFormat.checksum("") == "000000")
    }

    @Test("scope lists parse, dedupe, and refuse unknown or empty lists")
    func scopes() throws {
        #expect(try APIKeyScope.parseList("send, read,send") == [.send, .read])
        #expect(throws: DomainError.self) { try APIKeyScope.parseList("send,write") }
        #expect(throws: DomainError.self) { try APIKeyScope.parseList(" , ") }
    }
}
