package millpond.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The top-level keys of a JSON object line that a schema does not name: bronze's {@code _new_fields}.
 *
 * <p>The line is tokenized by a Jackson parser from the same factory from_json builds from the source's options
 * (JSONOptions.buildJsonFactory), so a key is what from_json reads as one: single-quoted, unquoted when
 * allowUnquotedFieldNames is set, never text inside a value or a comment. Values are skipped, not converted, which
 * is what makes this cheaper than Spark's built-in {@code map_keys(from_json(line, 'map<string,variant>'))}, the
 * standard path it must equal (tests/integration/speedups/test_json_functions.py).
 */
public final class JsonLineKeys {
  private static final PerTask<JsonFactory> FACTORIES = new PerTask<>();
  private static final PerTask<Set<String>> KNOWN = new PerTask<>();

  private JsonLineKeys() {}

  /**
   * The line's top-level keys not in {@code known}, in first-seen order without repeats, or null when there are
   * none, or when the line is not one JSON object. Never throws: a malformed line is the parse's to report.
   */
  public static ArrayData unknownTopLevelKeys(UTF8String line, ArrayData known, MapData options) {
    Set<String> names = KNOWN.get(known, null, () -> names(known));
    List<UTF8String> unknown = null;
    try (JsonParser parser = JsonLineParser.bytesParser(FACTORIES.get(options, null, () -> factory(options)), line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        if (!names.contains(name)) {
          UTF8String key = UTF8String.fromString(name);
          if (unknown == null) {
            unknown = new ArrayList<>(2);
          }
          if (!unknown.contains(key)) {
            unknown.add(key);
          }
        }
        parser.nextToken();
        parser.skipChildren();
      }
      if (parser.currentToken() != JsonToken.END_OBJECT) {
        return null;
      }
    } catch (IOException | RuntimeException malformed) {
      return null;
    }
    return unknown == null ? null : new GenericArrayData(unknown.toArray());
  }

  /** from_json's Jackson factory for these options; each caller caches it per task (PerTask). */
  static JsonFactory factory(MapData options) {
    return JsonLineParser.jsonOptions(JsonLineParser.asMap(options)).buildJsonFactory();
  }

  static Set<String> names(ArrayData names) {
    Set<String> set = new HashSet<>();
    for (int k = 0; k < names.numElements(); k++) {
      if (!names.isNullAt(k)) {
        set.add(names.getUTF8String(k).toString());
      }
    }
    return set;
  }
}
