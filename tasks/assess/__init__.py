"""Privacy and utility assessment of protected copies: paper 000's attribute attacker, paper 004's evaluator functions."""
