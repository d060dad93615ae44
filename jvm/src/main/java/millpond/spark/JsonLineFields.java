package millpond.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.io.StringWriter;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Some top-level fields of a JSON object line, as a JSON object of their own: bronze's {@code _rescued_data}, the
 * fields its schema does not name.
 *
 * <p>Spark's built-ins need {@code to_json(map_filter(from_json(line, 'map<string,variant>'), ...))}, and map_filter
 * cannot be compiled into a whole-stage-codegen stage: the projection holding it ran outside the stage for every
 * line, each row copied across, even though only lines with new fields evaluate it (bench/parse_cost.py). The line
 * is read by from_json's own Jackson factory for the source's options (JsonLineKeys), so single quotes, comments and
 * unquoted names are read exactly as the parse reads them.
 */
public final class JsonLineFields {
  // Writes the values found: plain JSON, whatever leniency the line was read with.
  private static final JsonFactory JSON = new JsonFactory();
  private static final PerTask<JsonFactory> FACTORIES = new PerTask<>();
  // The most digits of an integer Spark's variant keeps exactly (a DECIMAL(38, 0)); a longer one becomes a double.
  private static final int VARIANT_MAX_DIGITS = 38;

  private JsonLineFields() {}

  /**
   * The line's top-level fields named in {@code names}, in the line's order, each value as compact JSON with its
   * numbers' text unchanged; a repeated key keeps its last value, as JSON readers do. Null when no field is named,
   * or when the line is not one JSON object.
   */
  public static UTF8String fieldsNamed(UTF8String line, ArrayData names, MapData options) {
    Set<String> wanted = JsonLineKeys.names(names);
    Map<String, String> found = null;
    try (JsonParser parser = JsonLineParser.bytesParser(
        FACTORIES.get(options, null, () -> JsonLineKeys.factory(options)), line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        parser.nextToken();
        if (wanted.contains(name)) {
          if (found == null) {
            found = new LinkedHashMap<>();
          }
          found.put(name, compact(parser));
        } else {
          parser.skipChildren();
        }
      }
      if (found == null || parser.currentToken() != JsonToken.END_OBJECT) {
        return null;
      }
      StringWriter out = new StringWriter();
      try (JsonGenerator generator = JSON.createGenerator(out)) {
        generator.writeStartObject();
        for (Map.Entry<String, String> field : found.entrySet()) {
          generator.writeFieldName(field.getKey());
          generator.writeRawValue(field.getValue());
        }
        generator.writeEndObject();
      }
      return UTF8String.fromString(out.toString());
    } catch (IOException | RuntimeException malformed) {
      return null;  // the parse reports a malformed line; this only copies fields of good ones
    }
  }

  /** The value at the parser's current token as compact JSON; the parser is left on its last token. */
  private static String compact(JsonParser parser) throws IOException {
    StringWriter out = new StringWriter();
    try (JsonGenerator generator = JSON.createGenerator(out)) {
      copy(parser, generator);
    }
    return out.toString();
  }

  private static void copy(JsonParser parser, JsonGenerator generator) throws IOException {
    JsonToken token = parser.currentToken();
    switch (token) {
      case START_OBJECT -> {
        generator.writeStartObject();
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
          generator.writeFieldName(parser.currentName());
          parser.nextToken();
          copy(parser, generator);
        }
        generator.writeEndObject();
      }
      case START_ARRAY -> {
        generator.writeStartArray();
        while (parser.nextToken() != JsonToken.END_ARRAY) {
          copy(parser, generator);
        }
        generator.writeEndArray();
      }
      case VALUE_STRING -> generator.writeString(parser.getText());
      // A number keeps its text, except where Spark's variant (the standard path) cannot keep its value: an integer
      // of more than 38 digits becomes a double, and NaN, Infinity and a number past double's range become strings
      // (they are no JSON numbers), so that both paths hold the same values.
      case VALUE_NUMBER_INT -> {
        String text = parser.getText();
        if (text.length() - (text.startsWith("-") ? 1 : 0) > VARIANT_MAX_DIGITS) {
          generator.writeNumber(parser.getDoubleValue());
        } else {
          generator.writeNumber(text);
        }
      }
      case VALUE_NUMBER_FLOAT -> {
        if (parser.isNaN()) {
          generator.writeString(parser.getText());
        } else if (Double.isInfinite(parser.getDoubleValue())) {
          generator.writeString(parser.getDoubleValue() > 0 ? "Infinity" : "-Infinity");
        } else {
          generator.writeNumber(parser.getText());
        }
      }
      case VALUE_TRUE, VALUE_FALSE -> generator.writeBoolean(token == JsonToken.VALUE_TRUE);
      case VALUE_NULL -> generator.writeNull();
      default -> throw new IOException("unexpected " + token);
    }
  }
}
