"""Tool calls in a model's reply: one record per format family, parsers, and a stream reader.

- `families`: `ToolFamily` and the table of family records (`FAMILIES`), the one list of
  what a family is made of; `family_of_template` reads a chat template's family off it;
- `hermes`, `llama3`, `mistral`, `pythonic`: each family's format, its whole-reply parser and
  its stream grammar;
- `json_calls`: calls written as JSON objects, shared by hermes, llama3 and mistral;
- `replies`: a whole reply's calls (`parse_reply`, `read_reply`, `read_as_streamed`,
  `ends_inside_call`);
- `reader`: `ToolCallReader`, which reads calls while a reply streams, and `FirstCallEnd`;
- `stream`: the reading the stream grammars run on; `events`: what a reader says;
- `calls`: `ParsedCall` and `ParsedReply`; `json_scan`: a JSON value checked a character at
  a time.

Pure code; `ast` reads pythonic calls without running anything.
"""
