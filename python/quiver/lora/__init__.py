"""LoRA adapters: quiver.lora.request.LoRARequest, as in vLLM."""
