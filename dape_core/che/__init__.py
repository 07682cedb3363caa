"""The CHE benchmark (Table 6): the 15 tasks and the encoder runner that trains and range-evaluates them."""
