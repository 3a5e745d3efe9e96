import Foundation
import Hummingbird

/// The request context of every route: Hummingbird's basic one, with answers encoded as the
/// README shows them (`APIContext.encoder`).
struct APIContext: RequestContext {
    var coreContext: CoreRequestContextStorage

    init(source: Source) {
        coreContext = .init(source: source)
    }

    var responseEncoder: JSONEncoder { Self.encoder() }

    /// Every JSON answer's encoder, the live stream's too: keys in order, so that an answer
    /// reads the same every time, and `"Person/12"`, not the `"Person\/12"` JSONEncoder writes
    /// by default.
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
