// The registry of searcher schemas the experiment config reader checks a searcher section
// against (filled by the experiment layer's searcher registry).
#include "tessera/trial/searcher_schema.h"

#include <sstream>

#include "tessera/named_registry.h"

namespace tessera::trial {

namespace {

NamedRegistry<SearcherSchema>& searcher_schemas() {
  static NamedRegistry<SearcherSchema> registry("searcher", {});
  return registry;
}

// "a", "a or b", "a, b or c".
std::string or_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

std::string SearcherParam::range_text() const {
  if (kind == Kind::Choice) return or_list(choices);
  if (max)
    return "in " + std::string(min_exclusive ? "(" : "[") + number_text(min) + ", " +
           number_text(*max) + "]";
  return (min_exclusive ? "> " : ">= ") + number_text(min);
}

const char* SearcherParam::kind_text() const {
  switch (kind) {
    case Kind::Count:
      return "integer";
    case Kind::Number:
      return "number";
    case Kind::Choice:
      return "choice";
    case Kind::CountList:
      return "integers";
  }
  return "";
}

void register_searcher_schema(SearcherSchema schema) {
  searcher_schemas().add(std::move(schema), "register_searcher_schema");
}

const SearcherSchema* find_searcher_schema(const std::string& type) {
  return searcher_schemas().find_if_registered(type);
}

std::string registered_searcher_schemas_text() {
  return or_list(searcher_schemas().types());
}

}  // namespace tessera::trial
