"""The wire protocol shared by the agent and the warehouse: types, row encoding, framing."""
